"""The app serves the playground at `/` and its files under `/web/`, and nothing else changes for the API."""

from __future__ import annotations

from oberik.api.app import WEB_DIR
from tests.api_fixtures import Api


def test_the_page_and_its_modules_are_served(api: Api):
    page = api.client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert '<script type="module" src="web/app.js">' in page.text
    for name in ("app.js", "api.js", "sse.js", "cited.js", "dom.js"):
        module = api.client.get(f"/web/{name}")
        assert module.status_code == 200, name
        assert "javascript" in module.headers["content-type"]
        assert module.text == (WEB_DIR / name).read_text()
    assert api.client.get("/web/style.css").headers["content-type"].startswith("text/css")


def test_unknown_paths_are_still_json_404s(api: Api):
    for path in ("/nope", "/web/nope.js", "/web/../pyproject.toml", "/index.html", "/app.js"):
        r = api.client.get(path)
        assert r.status_code == 404, path
        assert r.json()["code"] == "no_route", path
    assert api.client.post("/web/app.js").status_code == 405


def test_the_playground_is_not_part_of_the_api_description(api: Api):
    paths = api.client.get("/openapi.json").json()["paths"]
    assert "/" not in paths and not any(p.startswith("/web") for p in paths)
