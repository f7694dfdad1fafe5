"""Web push: the key, subscriptions, and the hook, against a push service on loopback that decrypts every message
with the subscribed browser's private key and checks the VAPID token against the deployment's public key."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from typing import Any

import pytest

from oberik.adapters.dynamodb import DynamoStore
from oberik.domain import push as push_rules
from oberik.local.scripted_provider import Reply, ScriptedProvider
from tests.api_fixtures import Api, Project, table_items
from tests.push.conftest import (
    Answer,
    PushService,
    VapidPair,
    b64url,
    new_vapid_pair,
    subscribe,
    use_vapid,
    webhook_secret,
)

ANSWER = "The Q3 numbers are in: revenue is up 12% on Q2, costs flat."


def stopped(session_id: str, **fields: Any) -> dict[str, Any]:
    """A turn.stopped body as the platform sends it (every field present)."""
    body = {
        "event": "turn.stopped",
        "reason": "completed",
        "needs_input": False,
        "complete": True,
        "scheduled": False,
        "tenant_id": "t",
        "session_id": session_id,
        "user_ref": None,
        "preview": ANSWER,
        "preview_truncated": False,
        "content_chars": len(ANSWER),
        "tools": [],
        "questions": [],
        "approvals": [],
    }
    body.update(fields)
    return body


def encode(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def sign(secret: str, raw: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), raw, hashlib.sha256).hexdigest()


def deliver(
    api: Api, raw: bytes, *, secret: str | None, delivery_id: str = "dlv_test_1", signature: str | None = None
) -> Any:
    headers = {"Content-Type": "application/json", "X-Delivery-Id": delivery_id}
    if signature is not None:
        headers["X-Signature"] = signature
    elif secret is not None:
        headers["X-Signature"] = sign(secret, raw)
    return api.client.post("/push/hook", content=raw, headers=headers)


def session_of(api: Api, token: str, provider: ScriptedProvider) -> str:
    provider.script(Reply(text=ANSWER))
    r = api.chat(token, message="Q3 numbers?")
    assert r.status_code == 200, r.text
    return str(r.json()["session_id"])


def subscription_items() -> list[dict[str, Any]]:
    return [i for i in table_items() if i["pk"]["S"].startswith("PUSHSUB#")]


# --- the key ---------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("no_vapid")
def test_the_key_is_blank_and_subscribing_is_refused_when_push_is_off(api: Api, token: str, push_service: PushService):
    # Given a deployment without VAPID keys
    # When the page asks for the key
    r = api.get("/push/key", token)
    # Then it is blank
    assert r.status_code == 200 and r.json() == {"key": ""}
    # And a subscription is refused with a sentence saying why, and nothing is stored
    r = subscribe(api, token, push_service.browser("ana-laptop"))
    assert r.status_code == 409 and r.json()["code"] == "push_off"
    assert "VAPID" in r.json()["detail"]
    assert subscription_items() == []


def test_the_key_is_the_deployments_public_key(api: Api, token: str, vapid: VapidPair):
    r = api.get("/push/key", token)
    assert r.status_code == 200 and r.json() == {"key": vapid.public}
    # And, like every data-plane route, it needs a token
    r = api.client.get("/push/key")
    assert r.status_code == 401 and r.json()["code"] == "token_missing"


def test_a_public_key_that_is_not_the_private_keys_half_turns_push_off(
    api: Api, token: str, monkeypatch: pytest.MonkeyPatch
):
    # Given two halves of two different pairs
    one, other = new_vapid_pair(), new_vapid_pair()
    use_vapid(monkeypatch, VapidPair(public=one.public, private=other.private, subject=one.subject))
    # Then push counts as off: browsers would be subscribed to a key nobody can sign for
    assert api.get("/push/key", token).json() == {"key": ""}


def test_only_one_half_of_the_pair_leaves_push_off(api: Api, token: str, monkeypatch: pytest.MonkeyPatch):
    pair = new_vapid_pair()
    use_vapid(monkeypatch, None)
    monkeypatch.setenv("VAPID_PUBLIC_KEY", pair.public)
    from oberik.settings import get_settings

    get_settings.cache_clear()
    assert api.get("/push/key", token).json() == {"key": ""}


# --- subscribing -----------------------------------------------------------------------------------------


def _good(push_service: PushService) -> dict[str, Any]:
    return push_service.browser("ana-laptop").subscription()


BAD_BODIES = [
    ("a list", lambda s: [s], "body"),
    ("no endpoint", lambda s: {k: v for k, v in s.items() if k != "endpoint"}, "endpoint"),
    ("a blank endpoint", lambda s: {**s, "endpoint": "  "}, "endpoint"),
    ("an ftp endpoint", lambda s: {**s, "endpoint": "ftp://push.example/abc"}, "endpoint"),
    ("no keys", lambda s: {"endpoint": s["endpoint"]}, "keys"),
    ("keys as a string", lambda s: {**s, "keys": "p256dh,auth"}, "keys"),
    ("no p256dh", lambda s: {**s, "keys": {"auth": s["keys"]["auth"]}}, "keys.p256dh"),
    ("p256dh not base64", lambda s: {**s, "keys": {**s["keys"], "p256dh": "not base64!"}}, "keys.p256dh"),
    (
        "p256dh too short",
        lambda s: {**s, "keys": {**s["keys"], "p256dh": b64url(b"\x04" + b"\x01" * 31)}},
        "keys.p256dh",
    ),
    (
        "p256dh off the curve",
        lambda s: {**s, "keys": {**s["keys"], "p256dh": b64url(b"\x04" + b"\x01" * 64)}},
        "keys.p256dh",
    ),
    ("no auth", lambda s: {**s, "keys": {"p256dh": s["keys"]["p256dh"]}}, "keys.auth"),
    ("auth of 8 bytes", lambda s: {**s, "keys": {**s["keys"], "auth": b64url(b"12345678")}}, "keys.auth"),
    ("expired", lambda s: {**s, "expirationTime": (time.time() - 60) * 1000}, "expirationTime"),
    ("expirationTime as text", lambda s: {**s, "expirationTime": "tomorrow"}, "expirationTime"),
]


@pytest.mark.usefixtures("vapid", "allow_private")
@pytest.mark.parametrize(("case", "make", "field"), BAD_BODIES, ids=[c[0] for c in BAD_BODIES])
def test_a_malformed_subscription_is_a_400_naming_the_field(
    api: Api, token: str, push_service: PushService, case: str, make: Any, field: str
):
    r = api.client.post("/push/subscribe", json=make(_good(push_service)), headers=api.bearer(token))
    assert r.status_code == 400, (case, r.text)
    assert r.json()["field"] == field
    assert r.json()["detail"].endswith(".") and len(r.json()["detail"]) > 20
    assert subscription_items() == []


@pytest.mark.usefixtures("vapid")
def test_endpoints_the_egress_guard_refuses_are_400s(api: Api, token: str, push_service: PushService):
    sub = _good(push_service)
    # Without the allow-private switch a loopback endpoint is refused, and plain http is refused outright
    r = api.client.post("/push/subscribe", json=sub, headers=api.bearer(token))
    assert r.status_code == 400 and "https" in r.json()["detail"]
    r = api.client.post(
        "/push/subscribe", json={**sub, "endpoint": "https://127.0.0.1:9/wpush/x"}, headers=api.bearer(token)
    )
    assert r.status_code == 400 and r.json()["code"] == "target_refused"
    # And a cloud metadata address is refused whatever else is allowed
    r = api.client.post(
        "/push/subscribe", json={**sub, "endpoint": "https://169.254.169.254/latest"}, headers=api.bearer(token)
    )
    assert r.status_code == 400 and r.json()["code"] == "target_refused"
    assert subscription_items() == []


@pytest.mark.usefixtures("vapid", "allow_private")
def test_subscribing_is_idempotent_per_endpoint(api: Api, token: str, push_service: PushService):
    browser = push_service.browser("ana-laptop")
    first = subscribe(api, token, browser)
    assert first.status_code == 201, first.text
    assert first.json()["subscribed"] is True and first.json()["endpoint"] == browser.endpoint
    again = subscribe(api, token, browser)
    assert again.status_code == 200
    assert again.json()["created_at"] == first.json()["created_at"]
    assert len(subscription_items()) == 1
    # A subscription without a token is not taken
    r = api.client.post("/push/subscribe", json=browser.subscription())
    assert r.status_code == 401


# --- the hook: a real encrypted round trip ---------------------------------------------------------------


@pytest.mark.usefixtures("allow_private")
def test_a_signed_turn_stopped_is_pushed_encrypted_to_the_subjects_browser(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    push_service: PushService,
    vapid: VapidPair,
):
    # Given ana's browser subscribed, and a conversation of hers that just finished
    browser = push_service.browser("ana-laptop")
    assert subscribe(api, token, browser).status_code == 201
    session_id = session_of(api, token, provider)
    raw = encode(stopped(session_id))

    # When the project's signed turn.stopped reaches the hook
    r = deliver(api, raw, secret=webhook_secret(api, scripted_project))

    # Then the hook reports one push sent
    assert r.status_code == 200, r.text
    assert r.json()["sent"] == 1 and r.json()["event"] == "turn.stopped"
    (got,) = push_service.wait_for(browser)
    # And the push service saw a valid VAPID token for its own origin, signed by the deployment's key
    assert got.problem is None, got.problem
    assert got.vapid_key == vapid.public
    assert got.claims is not None
    assert got.claims["aud"] == push_service.url and got.claims["sub"] == vapid.subject
    assert time.time() < got.claims["exp"] <= time.time() + 24 * 3600
    # And the browser's private key decrypts a notification made from the event
    assert got.message == {
        "title": "The answer is ready",
        "body": ANSWER,
        "tag": f"oberik-{session_id}",
        "url": f"./#session={session_id}",
        "session_id": session_id,
        "reason": "completed",
        "needs_input": False,
    }
    # And it is kept for an offline browser, and newer news of the same conversation replaces it
    assert got.header("Content-Encoding") == "aes128gcm"
    assert got.header("TTL") == str(push_rules.NOTIFICATION_TTL_SECONDS)
    assert got.header("Urgency") == "normal"
    assert got.header("Topic") == push_rules.topic_for(session_id)


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_pause_for_approval_is_pushed_urgently_with_the_action(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    browser = push_service.browser("ana-phone")
    subscribe(api, token, browser)
    session_id = session_of(api, token, provider)
    body = stopped(
        session_id,
        reason="needs_approval",
        needs_input=True,
        complete=False,
        preview=None,
        approvals=[{"tool_call_id": "c1", "action": "Email the Q3 numbers to finance"}],
    )
    r = deliver(api, encode(body), secret=webhook_secret(api, scripted_project))
    assert r.status_code == 200 and r.json()["sent"] == 1
    (got,) = push_service.wait_for(browser)
    assert got.message["title"] == "The agent asks for your approval"
    assert got.message["body"] == "Email the Q3 numbers to finance"
    assert got.message["needs_input"] is True
    assert got.header("Urgency") == "high"


@pytest.mark.usefixtures("allow_private", "vapid")
def test_resubscribing_an_endpoint_with_new_keys_encrypts_for_the_new_keys(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    # Given a browser that subscribed, then got new keys for the same endpoint
    from cryptography.hazmat.primitives.asymmetric import ec

    browser = push_service.browser("ana-laptop")
    subscribe(api, token, browser)
    browser.key = ec.generate_private_key(ec.SECP256R1())
    assert subscribe(api, token, browser).status_code == 200
    session_id = session_of(api, token, provider)
    # Then the push decrypts with the new key
    deliver(api, encode(stopped(session_id)), secret=webhook_secret(api, scripted_project))
    (got,) = push_service.wait_for(browser)
    assert got.problem is None, got.problem
    assert got.message["title"] == "The answer is ready"


@pytest.mark.usefixtures("allow_private", "vapid")
def test_only_the_waiting_subjects_browsers_in_that_project_are_pushed(
    api: Api, scripted_project: Project, provider: ScriptedProvider, push_service: PushService
):
    # Given ana (two browsers) and bob in this project, and another project that also has an "ana"
    ana, bob = api.token(scripted_project, "ana"), api.token(scripted_project, "bob")
    ana_laptop, ana_phone = push_service.browser("ana-laptop"), push_service.browser("ana-phone")
    bobs = push_service.browser("bob-laptop")
    for token, browser in ((ana, ana_laptop), (ana, ana_phone), (bob, bobs)):
        assert subscribe(api, token, browser).status_code == 201
    other = api.create_project("elsewhere")
    other_ana = push_service.browser("other-ana")
    assert subscribe(api, api.token(other, "ana"), other_ana).status_code == 201

    # When ana's conversation stops
    session_id = session_of(api, ana, provider)
    r = deliver(api, encode(stopped(session_id)), secret=webhook_secret(api, scripted_project))

    # Then both of ana's browsers in this project are pushed, and nobody else
    assert r.status_code == 200 and r.json()["sent"] == 2
    push_service.wait_for(ana_laptop)
    push_service.wait_for(ana_phone)
    assert push_service.to(bobs) == [] and push_service.to(other_ana) == []
    assert {p.browser for p in push_service.received} == {"ana-laptop", "ana-phone"}


# --- the hook: who may call it ---------------------------------------------------------------------------


@pytest.mark.usefixtures("allow_private", "vapid")
def test_unsigned_and_forged_deliveries_are_401s_and_push_nothing(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    browser = push_service.browser("ana-laptop")
    subscribe(api, token, browser)
    session_id = session_of(api, token, provider)
    secret = webhook_secret(api, scripted_project)
    raw = encode(stopped(session_id))

    # Unsigned
    r = deliver(api, raw, secret=None)
    assert r.status_code == 401 and r.json()["code"] == "signature_missing"
    # Signed with some other key
    r = deliver(api, raw, secret="whsec_not-the-projects")
    assert r.status_code == 401 and r.json()["code"] == "signature_invalid"
    # Signed, then changed in transit
    tampered = raw.replace(b"The Q3 numbers", b"Pay invoice 7 ")
    r = deliver(api, tampered, secret=None, signature=sign(secret, raw))
    assert r.status_code == 401 and r.json()["code"] == "signature_invalid"
    # Signed by another project's key, naming this project's conversation
    other = api.create_project("elsewhere")
    r = deliver(api, raw, secret=webhook_secret(api, other))
    assert r.status_code == 401
    # Naming a conversation that does not exist
    ghost = encode(stopped("s_does_not_exist"))
    r = deliver(api, ghost, secret=secret)
    assert r.status_code == 401
    # Not JSON at all
    r = deliver(api, b"hello", secret=secret)
    assert r.status_code == 401
    assert push_service.received == []

    # And after the project rotates its key, the old one no longer opens the hook
    rotated = api.client.post(
        f"/api/projects/{scripted_project.id}/webhook-secret/rotate", headers=scripted_project.headers
    )
    assert rotated.status_code in (200, 201), rotated.text
    assert deliver(api, raw, secret=secret).status_code == 401
    assert deliver(api, raw, secret=webhook_secret(api, scripted_project)).status_code == 200
    push_service.wait_for(browser)


@pytest.mark.usefixtures("allow_private", "vapid")
def test_other_events_are_acknowledged_and_not_pushed(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    browser = push_service.browser("ana-laptop")
    subscribe(api, token, browser)
    session_id = session_of(api, token, provider)
    body = {
        "event": "scheduled_task.fired",
        "task_id": "t1",
        "tenant_id": "t",
        "session_id": session_id,
        "message": "x",
    }
    r = deliver(api, encode(body), secret=webhook_secret(api, scripted_project))
    assert r.status_code == 200 and r.json()["sent"] == 0
    assert "scheduled_task.fired" in r.json()["skipped"]
    assert push_service.received == []


@pytest.mark.usefixtures("allow_private", "no_vapid")
def test_with_push_off_the_hook_acknowledges_and_sends_nothing(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider
):
    session_id = session_of(api, token, provider)
    r = deliver(api, encode(stopped(session_id)), secret=webhook_secret(api, scripted_project))
    assert r.status_code == 200 and r.json()["sent"] == 0 and "off" in r.json()["skipped"]


# --- the hook: what the push service answers -------------------------------------------------------------


@pytest.mark.usefixtures("allow_private", "vapid")
@pytest.mark.parametrize("status", [404, 410])
def test_a_subscription_the_push_service_says_is_gone_is_forgotten(
    api: Api,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    push_service: PushService,
    status: int,
):
    gone, kept = push_service.browser("ana-old"), push_service.browser("ana-new")
    subscribe(api, token, gone)
    subscribe(api, token, kept)
    push_service.script(gone, status)
    session_id = session_of(api, token, provider)
    secret = webhook_secret(api, scripted_project)

    r = deliver(api, encode(stopped(session_id)), secret=secret)
    assert r.status_code == 200, r.text
    assert r.json()["sent"] == 1 and r.json()["removed"] == 1
    store = DynamoStore()
    assert store.get_push_subscription(scripted_project.id, push_rules.endpoint_hash(gone.endpoint)) is None
    assert store.get_push_subscription(scripted_project.id, push_rules.endpoint_hash(kept.endpoint)) is not None

    # And the next notification goes only to the browser that is still there
    r = deliver(
        api, encode(stopped(session_id, reason="hit_tool_limit", complete=False)), secret=secret, delivery_id="dlv_2"
    )
    assert r.json()["sent"] == 1
    assert len(push_service.to(gone)) == 1 and len(push_service.to(kept)) == 2


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_short_retry_after_is_waited_out_and_the_push_sent(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    browser = push_service.browser("ana-laptop")
    subscribe(api, token, browser)
    push_service.script(browser, Answer(429, retry_after="1"))
    session_id = session_of(api, token, provider)

    r = deliver(api, encode(stopped(session_id)), secret=webhook_secret(api, scripted_project))

    assert r.status_code == 200, r.text
    assert r.json()["sent"] == 1 and r.json()["deferred"] == 0
    first, second = push_service.wait_for(browser, 2)
    # The second try came no sooner than the push service asked
    assert second.at - first.at >= 1.0
    assert second.message["title"] == "The answer is ready"


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_long_retry_after_defers_the_delivery_and_is_honoured_on_its_retries(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    # Given a push service that asks for two minutes' quiet
    browser = push_service.browser("ana-laptop")
    subscribe(api, token, browser)
    push_service.script(browser, Answer(429, retry_after="120"))
    session_id = session_of(api, token, provider)
    raw, secret = encode(stopped(session_id)), webhook_secret(api, scripted_project)

    # When the delivery arrives
    r = deliver(api, raw, secret=secret)

    # Then the hook asks for the delivery again after that long (the delivery queue retries it)
    assert r.status_code == 503, r.text
    assert r.json()["code"] == "push_deferred" and r.json()["deferred"] == 1
    assert 110 <= int(r.headers["Retry-After"]) <= 120
    assert len(push_service.to(browser)) == 1
    # And a retry that comes early sends nothing to that endpoint
    r = deliver(api, raw, secret=secret)
    assert r.status_code == 503 and int(r.headers["Retry-After"]) <= 120
    assert len(push_service.to(browser)) == 1
    # And once the time has passed, the retry pushes it
    store = DynamoStore()
    store.push_not_before(scripted_project.id, push_rules.endpoint_hash(browser.endpoint), time.time() - 1)
    r = deliver(api, raw, secret=secret)
    assert r.status_code == 200 and r.json()["sent"] == 1
    assert push_service.wait_for(browser, 2)[1].message["title"] == "The answer is ready"


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_push_service_failure_is_retried_and_a_retried_delivery_is_not_pushed_twice(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    ok, flaky = push_service.browser("ana-laptop"), push_service.browser("ana-phone")
    subscribe(api, token, ok)
    subscribe(api, token, flaky)
    push_service.script(flaky, 502)
    session_id = session_of(api, token, provider)
    raw, secret = encode(stopped(session_id)), webhook_secret(api, scripted_project)

    # The first attempt reaches one browser, and asks for the delivery to be retried for the other
    r = deliver(api, raw, secret=secret, delivery_id="dlv_x")
    assert r.status_code == 503 and r.json()["sent"] == 1 and r.json()["failed"] == 1
    # The retry pushes only to the one that failed
    r = deliver(api, raw, secret=secret, delivery_id="dlv_x")
    assert r.status_code == 200 and r.json()["sent"] == 1 and r.json()["duplicates"] == 1
    # And one more copy of the same delivery pushes nothing
    r = deliver(api, raw, secret=secret, delivery_id="dlv_x")
    assert r.status_code == 200 and r.json()["sent"] == 0 and r.json()["duplicates"] == 2
    assert len(push_service.to(ok)) == 1 and len(push_service.to(flaky)) == 2


# --- the whole path: a turn stops, the project's webhook is the hook, the browser gets it ---------------


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_finished_turn_reaches_the_browser_through_the_projects_webhook(
    api: Api,
    live: str,
    scripted_project: Project,
    token: str,
    provider: ScriptedProvider,
    push_service: PushService,
    monkeypatch: pytest.MonkeyPatch,
):
    from oberik.engine import deliveries

    monkeypatch.setattr(deliveries, "RETRY_BASE_SECONDS", 0.0)
    # Given the project's webhook pointed at this deployment's own hook, and ana's browser subscribed
    api.configure(scripted_project, webhook_url=f"{live}/push/hook")
    browser = push_service.browser("ana-laptop")
    subscribe(api, token, browser)

    # When a turn finishes
    provider.script(Reply(text=ANSWER))
    done = api.chat(token, message="Q3 numbers?").json()

    # Then the turn.stopped delivery (SQS, signed) becomes a push the browser can decrypt
    (got,) = push_service.wait_for(browser, 1, timeout=30)
    assert got.problem is None, got.problem
    assert got.message["title"] == "The answer is ready" and got.message["body"] == ANSWER
    assert got.message["session_id"] == done["session_id"]


def test_the_service_worker_is_served_from_the_root(api: Api):
    from oberik.api.app import WEB_DIR

    r = api.client.get("/sw.js")
    assert r.status_code == 200 and "javascript" in r.headers["content-type"]
    assert r.text == (WEB_DIR / "sw.js").read_text()
    assert "/sw.js" not in api.client.get("/openapi.json").json()["paths"]


@pytest.mark.usefixtures("allow_private", "vapid")
def test_odd_deliveries_are_answered_with_sentences_never_500s(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    session_id = session_of(api, token, provider)
    secret = webhook_secret(api, scripted_project)
    raw = encode(stopped(session_id))
    # Nobody subscribed yet: acknowledged, nothing to do
    r = deliver(api, raw, secret=secret)
    assert r.status_code == 200 and r.json()["sent"] == 0 and "no browser" in r.json()["skipped"]
    # A signed delivery without its X-Delivery-Id
    r = api.client.post("/push/hook", content=raw, headers={"X-Signature": sign(secret, raw)})
    assert r.status_code == 400 and "X-Delivery-Id" in r.json()["detail"]
    # A session id no table key could hold
    huge = encode(stopped("s_" + "x" * 5000))
    assert deliver(api, huge, secret=secret).status_code == 401
    # A JSON body that is not an object
    assert deliver(api, b"[1, 2]", secret=secret).status_code == 401


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_429_without_retry_after_defers_for_a_minute(
    api: Api, scripted_project: Project, token: str, provider: ScriptedProvider, push_service: PushService
):
    browser = push_service.browser("ana-laptop")
    subscribe(api, token, browser)
    push_service.script(browser, 429)
    session_id = session_of(api, token, provider)
    r = deliver(api, encode(stopped(session_id)), secret=webhook_secret(api, scripted_project))
    assert r.status_code == 503 and 55 <= int(r.headers["Retry-After"]) <= 60
    assert len(push_service.to(browser)) == 1


@pytest.mark.usefixtures("allow_private", "vapid")
def test_a_subject_keeps_at_most_twenty_browsers_the_oldest_forgotten(
    api: Api, scripted_project: Project, token: str, push_service: PushService
):
    browsers = [push_service.browser(f"ana-{n}") for n in range(push_rules.MAX_SUBSCRIPTIONS_PER_SUBJECT + 1)]
    for browser in browsers:
        assert subscribe(api, token, browser).status_code == 201
    kept = DynamoStore().push_subscriptions(scripted_project.id, "ana")
    assert len(kept) == push_rules.MAX_SUBSCRIPTIONS_PER_SUBJECT
    assert browsers[0].endpoint not in {s.endpoint for s in kept}
