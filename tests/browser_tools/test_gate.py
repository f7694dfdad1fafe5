"""The gate's two rules for screenshot_url, on the catalog the browser family offers (no AWS, no Chromium)."""

from __future__ import annotations

from oberik.browser.tools import SCREENSHOT_URL, SPECS
from oberik.domain.capabilities import Gate, resolve_toolset

CATALOG = [*SPECS, SCREENSHOT_URL]
EVERYTHING = frozenset({"web_search", "browser", "output:image", "output:file"})


def _names(gate: Gate) -> tuple[list[str], dict[str, str]]:
    ts = resolve_toolset(gate, CATALOG)
    return ts.names, {w.name: w.unavailable for w in ts.withheld}


def test_browser_withholds_screenshot_url_with_a_reason():
    names, withheld = _names(Gate(ceiling=EVERYTHING, token=EVERYTHING))
    assert "screenshot_url" not in names and len(names) == 10
    assert "browser_goto followed by browser_screenshot" in withheld["screenshot_url"]


def test_without_browser_it_needs_web_search_and_any_output_kind():
    caps = frozenset({"web_search", "output:file"})
    assert _names(Gate(ceiling=EVERYTHING, token=caps))[0] == ["screenshot_url"]
    assert _names(Gate(ceiling=EVERYTHING, token=frozenset({"web_search"})))[0] == []
    assert _names(Gate(ceiling=EVERYTHING, token=frozenset({"output:image"})))[0] == []
    # the output kind must be in the ceiling too, not only on the token
    assert _names(Gate(ceiling=frozenset({"web_search", "browser"}), token=caps))[0] == []


def test_switching_the_browser_off_brings_screenshot_url_back():
    names, withheld = _names(Gate(ceiling=EVERYTHING, token=EVERYTHING, flags={"enable_browser": False}))
    assert names == ["screenshot_url"] and withheld == {}


def test_the_browser_family_is_offered_whole():
    names, _ = _names(Gate(ceiling=EVERYTHING, token=frozenset({"browser"})))
    assert names == [s.name for s in SPECS]
    assert {s.family for s in SPECS} == {"browser"}
