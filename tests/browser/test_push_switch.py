"""The playground's "notify me" switch in headless Chromium.

Debian's chromium-headless-shell has service workers and the Push API, but no push service behind them and no
notification permission: `pushManager.subscribe()` always rejects there. In Playwright's contexts, which are
off-the-record profiles, it says "AbortError: Registration failed - permission denied" (Chrome has no push in
incognito), even with the permission granted; in a persistent profile it says "push service not available".
`showNotification()` is refused in both.
So these tests check the real browser up to that line, and where it cannot go on they stand in for exactly the
missing piece: a subscription whose endpoint is the loopback push service of tests/push (which decrypts what it
is sent), and, for the last hop, Chrome DevTools' ServiceWorker.deliverPushMessage handing the decrypted payload
to the page's real service worker.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from oberik.domain import push as push_rules
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project
from tests.browser.conftest import Playground
from tests.push.conftest import (  # noqa: F401  (fixtures)
    PushService,
    VapidPair,
    b64url,
    no_vapid,
    point,
    push_service,
    vapid,
)

pytestmark = pytest.mark.browser

ANSWER = "The Q3 numbers are in: revenue is up 12% on Q2."

# Records every pushManager.subscribe() call (options, with the key as URL-safe base64), then calls through.
RECORD_SUBSCRIBE = """
window.__subscribeCalls = [];
const realSubscribe = PushManager.prototype.subscribe;
PushManager.prototype.subscribe = function (options) {
  const key = options && options.applicationServerKey;
  const bytes = key instanceof ArrayBuffer ? new Uint8Array(key) : new Uint8Array(key.buffer, key.byteOffset, key.byteLength);
  window.__subscribeCalls.push({
    userVisibleOnly: options.userVisibleOnly,
    key: btoa(String.fromCharCode(...bytes)).replace(/\\+/g, "-").replace(/\\//g, "_").replace(/=+$/, ""),
  });
  return window.__standIn ? window.__standIn(options) : realSubscribe.call(this, options);
};
"""

# The push service headless shell lacks: subscribe() resolves to a subscription at the loopback push service.
STAND_IN = """
(sub) => {
  window.__standIn = async (options) => {
    window.__fakeSub = {
      endpoint: sub.endpoint,
      expirationTime: null,
      options: { userVisibleOnly: options.userVisibleOnly, applicationServerKey: options.applicationServerKey },
      toJSON() { return { endpoint: sub.endpoint, expirationTime: null, keys: sub.keys }; },
      async unsubscribe() { window.__fakeSub = null; return true; },
    };
    return window.__fakeSub;
  };
  PushManager.prototype.getSubscription = async function () { return window.__fakeSub || null; };
}
"""


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def switch(pg: Playground) -> Any:
    return pg.page.get_by_role("switch", name="Notify me")


def flip(pg: Playground) -> None:
    """Click the switch where a person does: its label (the styled track sits over the checkbox itself)."""
    pg.page.locator("label[for=notify]").click()


@pytest.mark.usefixtures("no_vapid")
def test_without_a_vapid_key_the_switch_is_disabled_and_says_why(playground: Playground):
    pg = playground.open()
    expect(switch(pg)).to_be_disabled()
    expect(switch(pg)).not_to_be_checked()
    expect(pg.page.locator("#notify-note")).to_have_text("Unavailable: this deployment has no web push key.")
    assert "VAPID" in (pg.page.locator(".notify").get_attribute("title") or "")
    pg.shot("push-off")
    assert pg.errors == []


@pytest.mark.usefixtures("allow_private")
def test_switching_on_registers_the_worker_and_subscribes_with_the_deployments_key(
    playground: Playground,
    vapid: VapidPair,  # noqa: F811
    live: str,
):
    # Given a deployment with a VAPID pair
    playground.page.add_init_script(RECORD_SUBSCRIBE)
    pg = playground.open()
    expect(switch(pg)).to_be_enabled()
    expect(pg.page.locator("#notify-note")).to_contain_text("Off.")

    # When the person switches it on
    flip(pg)

    # Then the page asked the browser's push manager for a user-visible subscription to the deployment's key
    pg.page.wait_for_function("() => window.__subscribeCalls.length > 0")
    calls = pg.page.evaluate("() => window.__subscribeCalls")
    assert calls == [{"userVisibleOnly": True, "key": vapid.public}]
    # And its service worker is registered from the root, so its scope covers the page
    scope = pg.page.evaluate("async () => (await navigator.serviceWorker.getRegistration('sw.js'))?.scope")
    assert scope == f"{live}/"
    # And headless shell, which has no push service, refuses: the page says so and leaves the switch off
    note = pg.page.locator("#notify-note")
    expect(note).to_contain_text("Could not turn notifications on: the browser refused")
    expect(note).to_contain_text("Allow notifications for this site")
    expect(switch(pg)).not_to_be_checked()
    expect(switch(pg)).to_be_enabled()
    pg.shot("subscribe-refused-by-headless-shell")
    # (Chrome also logs that it has no Push API in an off-the-record profile, which every Playwright context is)
    assert [e for e in pg.errors if "does not support the Push API in incognito" not in e] == []


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_subscription_is_handed_to_the_deployment_and_a_stopped_turn_reaches_the_worker(
    playground: Playground,
    api: Api,
    live: str,
    scripted_project: Project,
    provider: ScriptedProvider,
    push_service: PushService,  # noqa: F811
):
    # Given the project's webhook pointed at the deployment's own /push/hook
    api.configure(scripted_project, webhook_url=f"{live}/push/hook")
    # And this browser's push service stood in for by the loopback one
    browser = push_service.browser("playground")
    playground.page.add_init_script(RECORD_SUBSCRIBE)
    pg = playground.open()
    pg.page.evaluate(STAND_IN, browser.subscription())

    # When the person switches notifications on
    flip(pg)

    # Then the page hands the subscription to POST /push/subscribe and says it is on
    expect(pg.page.locator("#notify-note")).to_have_text(
        "On: this browser is told when a turn stops, even with the tab closed."
    )
    expect(switch(pg)).to_be_checked()
    from oberik.adapters.dynamodb import DynamoStore

    stored = DynamoStore().get_push_subscription(scripted_project.id, push_rules.endpoint_hash(browser.endpoint))
    assert stored is not None and stored.owner == "ana"
    assert stored.p256dh == b64url(point(browser.key))

    # And when a turn of this subject stops, the push service receives a notification it can decrypt
    provider.script(Reply(text=ANSWER))
    pg.send("Q3 numbers?")
    pg.wait_until_idle()
    (got,) = push_service.wait_for(browser, 1, timeout=30)
    assert got.problem is None, got.problem
    assert got.message["title"] == "The answer is ready" and got.message["body"] == ANSWER

    # And the page's service worker, handed that payload as a push, turns it into a notification
    cdp = pg.page.context.new_cdp_session(pg.page)
    registrations: list[dict[str, Any]] = []
    cdp.on("ServiceWorker.workerRegistrationUpdated", lambda e: registrations.extend(e["registrations"]))
    cdp.send("ServiceWorker.enable")
    pg.page.wait_for_timeout(200)
    (registration,) = [r for r in registrations if r["scopeURL"] == f"{live}/" and not r["isDeleted"]]
    cdp.send(
        "ServiceWorker.deliverPushMessage",
        {"origin": live, "registrationId": registration["registrationId"], "data": json.dumps(got.message)},
    )
    # (headless shell refuses to show it, and the worker tells the open page what it tried)
    expect(pg.page.locator("#notify-note")).to_have_text(
        "A notification arrived (The answer is ready) but could not be shown."
    )
    pg.shot("push-delivered-to-worker")

    # And switching off unsubscribes this browser
    flip(pg)
    expect(pg.page.locator("#notify-note")).to_have_text("Off: this browser is unsubscribed.")
    assert pg.page.evaluate("() => window.__fakeSub") is None
    assert pg.errors == []
