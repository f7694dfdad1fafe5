"""The turn's citations register: everything a reader can check, numbered in one sequence per turn.

Tools add entries while the turn runs (`register`, through `ToolContext.cite`), and each addition streams the
register as a `citations` frame. When the turn's answer is handed back, `finalize` reads the answer's `[n]`
markers against the register:

* a marker that names no entry (the model made it up) is dropped from the answer, so it never becomes a pill;
* every sentence that ends with markers becomes a claim (`text`, `start`, `end`, `citations`), its offsets
  counted in code points of the content handed back;
* with markers "stripped" the `[n]` are taken out of the content and the claims' offsets point into what is left;
* each entry says whether the answer cited it (`used`), and `attribution` says how the answer is grounded:
  "per-claim" (sentences point at entries), "retrieval-only" (the turn was shown sources but cited none) or
  "none" (it was shown nothing citable).

Command output is not citable (it is gone once it scrolls past): a computation worth citing is written to a file
and read back, which makes it a `file` entry.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from typing import Any, Literal

from oberik.domain.models import Turn

KINDS = frozenset({"document", "web", "memory", "wiki", "tool", "preview", "file"})
# The fields every entry carries, whatever its kind; the rest (page, score, path, tool, ...) are its kind's extras.
BASE_FIELDS = ("marker", "kind", "title", "quote", "url", "used")

MAX_QUOTE_CHARS = 280
MAX_TITLE_CHARS = 200
MAX_URL_CHARS = 2048
# A turn's register lives on the turn's item; past this many entries a source is shown to the model unnumbered.
MAX_ENTRIES = 150

Markers = Literal["inline", "stripped"]
Attribution = Literal["per-claim", "retrieval-only", "none"]


# --- adding to the register -------------------------------------------------------------------------------


def _clip(text: Any, limit: int) -> str:
    flat = " ".join(str(text or "").split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def _default_title(kind: str, entry: dict[str, Any]) -> str:
    if kind == "web" and entry.get("url"):
        return str(entry["url"])
    if kind == "file" and entry.get("path"):
        return str(entry["path"])
    if kind == "tool" and entry.get("tool"):
        return f"Result of {entry['tool']}"
    if kind == "memory":
        return "Something you told me"
    return kind


def normalize(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry as the register keeps it: the base fields always present (title and quote as short one-line
    texts), the kind's extras kept as given. Raises ValueError for a kind that is not citable."""
    kind = entry.get("kind")
    if kind not in KINDS:
        if kind == "command":
            raise ValueError(
                "command output is not citable: nothing of it is left for a reader to check. Write the result to "
                "a file and cite the file instead."
            )
        raise ValueError(f"{kind!r} is not a kind of citation; use one of {', '.join(sorted(KINDS))}")
    out: dict[str, Any] = {k: v for k, v in entry.items() if k not in BASE_FIELDS and v is not None}
    title = _clip(entry.get("title"), MAX_TITLE_CHARS) or _clip(_default_title(kind, entry), MAX_TITLE_CHARS)
    url = entry.get("url")
    return {
        "kind": kind,
        "title": title,
        "quote": _clip(entry.get("quote"), MAX_QUOTE_CHARS),
        "url": str(url)[:MAX_URL_CHARS] if url else None,
        "used": False,
        **out,
    }


def _identity(entry: dict[str, Any]) -> tuple[Any, ...]:
    return tuple(entry.get(k) for k in ("kind", "url", "doc_id", "page", "path", "tool", "quote"))


def register(turn: Turn, entry: dict[str, Any], writer: Any) -> int:
    """Number `entry` in the turn's register and stream the register so far as a `citations` frame.

    The same source shown twice keeps its first number (and no frame is sent for it). Returns the marker the
    model should use, or 0 when the register is full (then hand the content over without a marker).
    """
    normal = normalize(entry)
    key = _identity(normal)
    for existing in turn.citations:
        if _identity(existing) == key:
            return int(existing["marker"])
    if len(turn.citations) >= MAX_ENTRIES:
        return 0
    marker = len(turn.citations) + 1
    turn.citations.append({"marker": marker, **normal})
    if writer is not None:
        writer.emit("citations", {"citations": [dict(e) for e in turn.citations]})
    return marker


def cite_tool_result(turn: Turn, tool: str, content: str, writer: Any, *, title: str | None = None) -> str:
    """Number a tool's answer as a `tool` entry (the tool's name, a quote of what it said) and return the content
    with its marker in front, as the model should see it. For tools whose answers come from the project's own
    systems (webhook tools, MCP servers)."""
    marker = register(turn, {"kind": "tool", "tool": tool, "title": title, "quote": content}, writer)
    return f"[{marker}] {content}" if marker else content


# --- reading the answer against the register --------------------------------------------------------------

# `[3]`, `[1, 2]`; not a markdown link's text (`[1](...)`).
_MARKER = re.compile(r"\[(\d{1,4}(?:\s*,\s*\d{1,4})*)\](?!\()")
_CODE = re.compile(r"```.*?(?:```|\Z)|`[^`\n]*`", re.DOTALL)
_ENDS = ".!?"
_CLOSERS = "\"')”’»*_"


@dataclass
class Attributed:
    """The answer as handed back: its content, the register (with `used`), the claims and the attribution."""

    content: str
    citations: list[dict[str, Any]] = field(default_factory=list)
    claims: list[dict[str, Any]] = field(default_factory=list)
    attribution: Attribution = "none"


def _code_spans(text: str) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _CODE.finditer(text)]


def _markers(text: str) -> list[re.Match[str]]:
    """Marker groups outside code: `arr[1]` in a code span is an index, not a citation."""
    spans = _code_spans(text)
    starts = [s for s, _ in spans]

    def in_code(at: int) -> bool:
        i = bisect_right(starts, at) - 1
        return i >= 0 and spans[i][0] <= at < spans[i][1]

    return [m for m in _MARKER.finditer(text) if not in_code(m.start())]


def _numbers(match: re.Match[str]) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", match.group(1))]


def _rewrite(text: str, replace: Any) -> tuple[str, list[int]]:
    """Apply `replace(match) -> str | None` to every marker group (None removes the group together with the blank
    space before it). Returns the new text and an offset map: for each position `i` of the new text, the
    position in the old text it came from (plus one entry for the end)."""
    out: list[str] = []
    old_of: list[int] = []
    cursor = 0
    for m in _markers(text):
        start, end = m.start(), m.end()
        new = replace(m)
        if new is None:
            cut = start
            while cut > cursor and text[cut - 1] in " \t":
                cut -= 1
            if cut == start and (start == 0 or text[start - 1] == "\n") and text[end : end + 1] == " ":
                end += 1  # a marker opening a line: take the space after it instead
            start = cut
        out.append(text[cursor:start])
        old_of.extend(range(cursor, start))
        if new is not None:
            out.append(new)
            # the new marker's characters map onto the old marker's start
            old_of.extend([m.start()] * len(new))
        cursor = end
    out.append(text[cursor:])
    old_of.extend(range(cursor, len(text)))
    old_of.append(len(text))
    return "".join(out), old_of


def _without_invented(content: str, known: set[int]) -> str:
    def keep(m: re.Match[str]) -> str | None:
        numbers = _numbers(m)
        valid = list(dict.fromkeys(n for n in numbers if n in known))
        if not valid:
            return None
        if len(valid) == len(numbers):
            return m.group(0)
        return "[" + ", ".join(str(n) for n in valid) + "]"

    return _rewrite(content, keep)[0]


def _sentences(text: str) -> list[tuple[int, int]]:
    """[start, end) of each sentence: up to `.`, `!` or `?` (with any closing quotes and marker groups after it)
    followed by a blank or the end, or up to a line break. Leading and trailing blanks are not part of it."""
    marks = {m.start(): m.end() for m in _markers(text)}
    out: list[tuple[int, int]] = []
    start: int | None = None
    i, n = 0, len(text)
    while i < n:
        if start is None:
            if text[i].isspace():
                i += 1
                continue
            start = i
        if i in marks:
            i = marks[i]
            continue
        c = text[i]
        if c == "\n":
            out.append((start, i))
            start = None
            i += 1
            continue
        if c in _ENDS:
            j = i + 1
            while j < n and text[j] in _ENDS:
                j += 1
            while j < n and text[j] in _CLOSERS:
                j += 1
            k = j
            while True:  # markers after the full stop belong to the sentence before it: "... days. [2]"
                probe = k
                while probe < n and text[probe] in " \t":
                    probe += 1
                if probe in marks:
                    k = marks[probe]
                    continue
                break
            if k >= n or text[k].isspace():
                out.append((start, k))
                start = None
                i = k
                continue
            i = j
            continue
        i += 1
    if start is not None:
        end = n
        while end > start and text[end - 1].isspace():
            end -= 1
        if end > start:
            out.append((start, end))
    return [(s, e) for s, e in ((s, _rstrip(text, s, e)) for s, e in out) if e > s]


def _rstrip(text: str, start: int, end: int) -> int:
    while end > start and text[end - 1].isspace():
        end -= 1
    return end


def _claims(text: str) -> list[dict[str, Any]]:
    """A claim for every sentence that carries markers, citing them in the order they appear."""
    groups = [(m.start(), _numbers(m)) for m in _markers(text)]
    claims: list[dict[str, Any]] = []
    for start, end in _sentences(text):
        cited: list[int] = []
        for at, numbers in groups:
            if start <= at < end:
                cited.extend(n for n in numbers if n not in cited)
        if cited:
            claims.append({"text": text[start:end], "start": start, "end": end, "citations": cited})
    return claims


def _strip(text: str, claims: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """The text without any marker, and the claims with offsets into it (trimmed of the blanks left behind)."""
    stripped, old_of = _rewrite(text, lambda _m: None)
    out: list[dict[str, Any]] = []
    for claim in claims:
        start = _new_position(old_of, claim["start"])
        end = _new_position(old_of, claim["end"])
        # blanks the markers stood between are not part of the claim
        while start < end and stripped[start].isspace():
            start += 1
        end = _rstrip(stripped, start, end)
        if end > start:
            out.append({**claim, "text": stripped[start:end], "start": start, "end": end})
    return stripped, out


def _new_position(old_of: list[int], old: int) -> int:
    """Where an offset of the old text lands in the new one: the first new position whose source is at or after
    it (`old_of` never decreases)."""
    return bisect_left(old_of, old)


def attribute(content: str, citations: list[dict[str, Any]], markers: Markers = "inline") -> Attributed:
    """Read an answer against the register it was written from (see the module docstring)."""
    known = {int(e["marker"]) for e in citations if isinstance(e.get("marker"), int)}
    cleaned = _without_invented(content, known)
    claims = _claims(cleaned)
    cited = {n for c in claims for n in c["citations"]}
    # a marker outside any sentence-shaped stretch still counts as use
    cited |= {n for m in _markers(cleaned) for n in _numbers(m)}
    if markers == "stripped":
        cleaned, claims = _strip(cleaned, claims)
    register = [{**e, "used": int(e["marker"]) in cited} for e in citations]
    if claims:
        attribution: Attribution = "per-claim"
    elif register:
        attribution = "retrieval-only"
    else:
        attribution = "none"
    return Attributed(cleaned, register, claims, attribution)


def finalize(turn: Turn) -> Attributed:
    """The turn's answer, register, claims and attribution as its terminal payload carries them."""
    return attribute(turn.content, turn.citations, turn.plan.citations_markers)


def clean_answer(turn: Turn, text: str) -> str:
    """`text` (the answer stored in the transcript) with the same treatment the content gets: invented markers
    dropped, and every marker when the project strips them."""
    return attribute(text, turn.citations, turn.plan.citations_markers).content


# --- the streamed answer ----------------------------------------------------------------------------------

# What may still turn into (or be) a marker group at the end of the text so far: blanks, then `[` with digits,
# commas and blanks, maybe closed (its next character decides whether it is a link's text), maybe blanks after.
_HELD = re.compile(r"[ \t]*(?:\[[\d,\s]{0,40}\]?[ \t]*)?\Z")


class StreamedMarkers:
    """Applies the content's marker treatment to the answer while it streams, so the text a client assembles from
    `token` frames reads as `content` will: invented markers never appear, and with markers "stripped" none do.

    Text that could still be part of a marker is held back until the next piece (or `close`) settles it. Code
    spans are not recognised here (a bracketed number inside one streams as the rule says; `content` keeps it).
    """

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.strip = turn.plan.citations_markers == "stripped"
        self._held = ""
        self._last = ""  # the last character let through: whether a marker starts a line depends on it

    def feed(self, text: str) -> str:
        self._held += text
        cut = _HELD.search(self._held)
        at = cut.start() if cut is not None else len(self._held)
        ready, self._held = self._held[:at], self._held[at:]
        return self._release(ready)

    def close(self) -> str:
        ready, self._held = self._held, ""
        return self._release(ready)

    def _release(self, text: str) -> str:
        if not text:
            return ""
        known = {int(e["marker"]) for e in self.turn.citations if isinstance(e.get("marker"), int)}
        context = self._last
        out = _without_invented(context + text, known)
        if self.strip:
            out = _rewrite(out, lambda _m: None)[0]
        out = out[len(context) :]
        if out:
            self._last = out[-1]
        return out
