"""The control-plane side of deliveries: setting webhook_url, the webhook secret, the deliveries log."""

from __future__ import annotations

import pytest

from oberik.adapters import http_delivery
from tests.api_fixtures import Api, Project


def patch_url(api: Api, project: Project, url: str | None) -> tuple[int, dict[str, object]]:
    r = api.client.patch(f"/api/projects/{project.id}/settings", json={"webhook_url": url}, headers=project.headers)
    return r.status_code, r.json()


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("http://127.0.0.1:8080/hook", "loopback"),
        ("http://[::1]/hook", "loopback"),
        ("http://localhost:3000/hook", "loopback"),
        ("http://10.0.0.12/hook", "private"),
        ("https://192.168.1.20/hook", "private"),
        ("http://169.254.169.254/latest/meta-data/", "metadata"),
        ("http://metadata.google.internal/computeMetadata/v1/", "metadata"),
        ("http://[fe80::1]/hook", "link-local"),
    ],
)
def test_internal_webhook_urls_are_refused_with_a_sentence(api: Api, project: Project, url: str, words: str):
    # Given a deployment that allows only public targets (the default)
    # When a project key sets webhook_url to an internal target
    status, body = patch_url(api, project, url)
    # Then it is refused with 400, a sentence naming why, and the setting is unchanged
    assert status == 400, body
    assert body["code"] == "target_refused" and body["field"] == "webhook_url"
    assert words in str(body["detail"]) and "public" in str(body["detail"])
    assert api.configure(project)["webhook_url"] is None


def test_a_name_resolving_to_an_internal_address_is_refused(
    api: Api, project: Project, monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setattr(http_delivery, "resolve", lambda host, port: ["10.20.30.40"])
    status, body = patch_url(api, project, "https://hooks.internal.example.com/x")
    assert status == 400 and "resolves to 10.20.30.40" in str(body["detail"])


@pytest.mark.parametrize("url", ["ftp://example.com/x", "not a url", "", "https://example.com/#frag"])
def test_malformed_webhook_urls_are_refused(api: Api, project: Project, url: str):
    status, body = patch_url(api, project, url)
    assert status == 400 and body["field"] == "webhook_url"


def test_a_public_webhook_url_is_kept_and_null_clears_it(api: Api, project: Project, monkeypatch: pytest.MonkeyPatch):
    # Given a name that resolves to a public address
    monkeypatch.setattr(http_delivery, "resolve", lambda host, port: ["93.184.215.14"])
    # When it is set, then cleared
    status, body = patch_url(api, project, "https://hooks.example.com/oberik")
    assert status == 200 and body["webhook_url"] == "https://hooks.example.com/oberik"
    status, body = patch_url(api, project, None)
    # Then it was kept, and null removed it
    assert status == 200 and body["webhook_url"] is None


def test_private_targets_may_be_allowed_for_local_testing_but_metadata_never(
    api: Api, project: Project, monkeypatch: pytest.MonkeyPatch
):
    # Given the switch only tests and `oberik dev` turn on
    from oberik.settings import get_settings

    monkeypatch.setenv("OBERIK_ALLOW_PRIVATE_WEBHOOKS", "1")
    get_settings.cache_clear()
    # Then loopback is accepted, and the metadata endpoint still is not
    assert patch_url(api, project, "http://127.0.0.1:9999/hook")[0] == 200
    assert patch_url(api, project, "http://169.254.169.254/")[0] == 400
    get_settings.cache_clear()


def test_the_webhook_secret_is_made_once_and_rotates(api: Api, project: Project):
    path = f"/api/projects/{project.id}/webhook-secret"
    # When the secret is read twice
    first = api.client.get(path, headers=project.headers).json()
    again = api.client.get(path, headers=project.headers).json()
    # Then it is the same key both times, and only the key is shown
    assert set(first) == {"secret"} and first == again and len(first["secret"]) >= 32
    # And rotating it gives a new key that reads back from then on
    rotated = api.client.post(f"{path}/rotate", headers=project.headers)
    assert rotated.status_code == 200 and rotated.json()["secret"] != first["secret"]
    assert api.client.get(path, headers=project.headers).json() == rotated.json()


def test_the_secret_and_the_log_need_the_projects_own_key(api: Api, project: Project):
    other = api.create_project("other")
    for method, path in [
        ("GET", "webhook-secret"),
        ("POST", "webhook-secret/rotate"),
        ("GET", "webhook-deliveries"),
    ]:
        url = f"/api/projects/{project.id}/{path}"
        assert api.client.request(method, url).status_code == 401, path
        assert api.client.request(method, url, headers=other.headers).status_code == 404, path


def test_the_deliveries_log_starts_empty(api: Api, project: Project):
    r = api.client.get(f"/api/projects/{project.id}/webhook-deliveries", headers=project.headers)
    assert r.status_code == 200 and r.json() == {"items": []}
