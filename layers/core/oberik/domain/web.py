"""The web tools' rules: the search provider a project configures, how its answer is read, and how fetched text is
marked as untrusted before the model reads it. Pure: the HTTP is `oberik.adapters.web_fetch`'s job.

A search provider is any HTTP API that answers a query with JSON holding a list of results. The project names
where to send the query and where in the answer the list and each result's title, URL and snippet are:

    {"url": "https://api.search.brave.com/res/v1/web/search", "api_key": "...",
     "api_key_header": "X-Subscription-Token", "api_key_prefix": "",
     "results_path": "web.results", "snippet_field": "description", "count_param": "count"}

    {"url": "https://google.serper.dev/search", "method": "POST", "api_key": "...", "api_key_header": "X-API-KEY",
     "api_key_prefix": "", "results_path": "organic", "url_field": "link"}

Paths are dotted keys (`web.results`, `meta.link`); a number in a path picks a list item (`data.0.items`).
"""

from __future__ import annotations

import re
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator

from oberik.domain import egress

_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")
_PATH = re.compile(r"^[A-Za-z0-9_$@-]+(?:\.[A-Za-z0-9_$@-]+)*$")
# Headers a project may not set on the provider request: they would change where or how the request goes.
_RESERVED_HEADERS = frozenset({"host", "content-length", "transfer-encoding", "connection", "content-type"})


class WebSearchSettings(BaseModel):
    """Where `web_search` sends a query and how it reads the answer (see the module docstring for examples)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(description="the provider's search endpoint (https)")
    method: Literal["GET", "POST"] = Field(
        default="GET", description="GET sends the query in the query string, POST as a JSON body"
    )
    query_param: str = Field(default="q", description="the parameter (GET) or JSON field (POST) holding the query")
    count_param: str | None = Field(default=None, description="a parameter that asks for max_results results")
    max_results: int = Field(default=5, ge=1, le=10, description="results handed to the model, at most")
    api_key: SecretStr | None = Field(default=None, description="sent in api_key_header; never shown back")
    api_key_header: str = Field(default="Authorization", description="the header that carries the key")
    api_key_prefix: str = Field(default="Bearer ", max_length=32, description="put before the key, e.g. 'Bearer '")
    results_path: str = Field(default="results", description="dotted path to the list of results in the answer")
    title_field: str = Field(default="title", description="dotted path to a result's title")
    url_field: str = Field(default="url", description="dotted path to a result's URL")
    snippet_field: str = Field(default="snippet", description="dotted path to a result's snippet")

    @field_validator("url")
    @classmethod
    def _url(cls, v: str) -> str:
        target = egress.parse_target(v, field="web_search.url")
        return target.url

    @field_validator("api_key_header")
    @classmethod
    def _header(cls, v: str) -> str:
        if not _HEADER.match(v) or v.lower() in _RESERVED_HEADERS:
            raise ValueError(f"{v!r} cannot carry the key: name an ordinary HTTP header such as X-API-Key")
        return v

    @field_validator("query_param", "count_param")
    @classmethod
    def _param(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"[A-Za-z0-9_.\-\[\]]{1,64}", v):
            raise ValueError(f"{v!r} is not a usable parameter name")
        return v

    @field_validator("results_path", "title_field", "url_field", "snippet_field")
    @classmethod
    def _path(cls, v: str) -> str:
        if not _PATH.match(v) or len(v) > 200:
            raise ValueError(f"{v!r} is not a dotted path such as web.results")
        return v

    def public(self) -> dict[str, Any]:
        """What the settings endpoints show: everything but the key, which is only said to be set or not."""
        shown = self.model_dump(mode="json", exclude={"api_key"})
        shown["api_key_set"] = self.api_key is not None
        return shown


def _at(value: Any, path: str) -> Any:
    for key in path.split("."):
        if isinstance(value, dict):
            value = value.get(key)
        elif isinstance(value, list) and key.isdigit() and int(key) < len(value):
            value = value[int(key)]
        else:
            return None
    return value


class ProviderAnswerUnreadable(ValueError):
    """The provider answered something the project's mapping does not find results in."""


def search_results(payload: Any, settings: WebSearchSettings) -> list[dict[str, str]]:
    """The results in a provider's JSON answer: `title`, `url` (http or https only) and `snippet`, at most
    `max_results`, each URL once."""
    found = _at(payload, settings.results_path)
    if found is None:
        raise ProviderAnswerUnreadable(
            f"the search provider's answer has nothing at results_path {settings.results_path!r}; check the "
            "project's web_search settings against what the provider returns"
        )
    if not isinstance(found, list):
        raise ProviderAnswerUnreadable(
            f"results_path {settings.results_path!r} holds {type(found).__name__}, not a list of results"
        )
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    for item in found:
        url = _at(item, settings.url_field)
        if not isinstance(url, str) or not url.lower().startswith(("http://", "https://")) or url in seen:
            continue
        seen.add(url)
        title = _at(item, settings.title_field)
        snippet = _at(item, settings.snippet_field)
        out.append(
            {
                "title": " ".join(str(title).split()) if isinstance(title, str | int | float) else "",
                "url": url,
                "snippet": _plain(snippet) if isinstance(snippet, str) else "",
            }
        )
        if len(out) >= settings.max_results:
            break
    return out


_TAG = re.compile(r"<[^>]{0,200}>")


def _plain(text: str) -> str:
    """A snippet without the highlighting markup providers wrap matches in (<b>, <strong>)."""
    return " ".join(_TAG.sub("", text).split())


# --- untrusted text -----------------------------------------------------------------------------------

_BRACKETED_NUMBER = re.compile(r"\[(\d{1,4}(?:\s*,\s*\d{1,4})*)\]")


def defang(text: str) -> str:
    """Fetched text with its own bracketed numbers (a wiki page's footnotes, a snippet's "[2]") turned into
    parentheses, so nothing a page says can pass for one of the turn's citation markers."""
    return _BRACKETED_NUMBER.sub(r"(\1)", text)


def untrusted(text: str, *, source: str, url: str | None = None) -> str:
    """`text` wrapped so the model can tell where outside material starts and ends. The closing tag carries a
    random id the text cannot know, so a page cannot end the block early and go on as if it were the platform."""
    tag_id = secrets.token_hex(4)
    where = ' url="{}"'.format(url.replace('"', "%22")) if url else ""
    return f'<untrusted source="{source}"{where} id="{tag_id}">\n{defang(text)}\n</untrusted id="{tag_id}">'
