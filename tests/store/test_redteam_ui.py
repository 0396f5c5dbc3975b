"""Red team: the web page with ids an outsider chose (percent signs, slashes, dot segments),
the token's redirect and cookie with odd bytes, and the page's headers."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urljoin

import httpx
import pytest

from otel_agent_context._store import open_store
from otel_agent_context.processor._config import Endpoint
from otel_agent_context.processor._ui import UiServer

# "." and "..": a browser resolves such a path segment away (even written %2E%2E)
CONVERSATIONS = ["a%41", "100%", "a/b", "x/../victim", "victim", "q?x#y", "é ü", "..", ".",
                 "..."]
CONTEXTS = ["ctx%41", "c/../d", "plain", "..", "."]


def _bundle(context_id: str, conversation: str) -> dict[str, Any]:
    return {"context_envelope": {"context_id": context_id,
                                 "telemetry_refs": [{"trace_id": "t-" + context_id}],
                                 "metadata": {"gen_ai.conversation.id": conversation},
                                 "created_at": "2026-01-01T00:00:00Z"}}


@pytest.fixture
def ui() -> Iterator[str]:
    store = open_store(":memory:")
    store.write([_bundle(f"c{n}", c) for n, c in enumerate(CONVERSATIONS)] +
                [_bundle(c, "ctxs") for c in CONTEXTS])
    server = UiServer(store, Endpoint("127.0.0.1", 0), bearer_token="s3cret")
    yield f"http://127.0.0.1:{server.start()}"
    server.stop()
    store.close()


AUTH = {"Authorization": "Bearer s3cret"}


def _browser_url(base: str, href: str) -> str:
    """Where a browser goes for a link: dot segments resolved (RFC 3986 5.2.4), as Chromium
    does (also for %2e, which the links here never hold)."""
    return urljoin(base + "/", html.unescape(href))


def test_every_conversation_and_envelope_link_opens_its_own_page(ui: str) -> None:
    page = httpx.get(ui + "/", headers=AUTH).text
    links = dict(re.findall(r'<a href="(/sessions/[^"]+)">([^<]*)</a>', page))
    for conversation in CONVERSATIONS:
        hrefs = [h for h, text in links.items() if html.unescape(text) == conversation]
        assert hrefs, conversation
        response = httpx.get(_browser_url(ui, hrefs[0]), headers=AUTH)
        assert response.status_code == 200, (conversation, hrefs[0])
        title = re.search(r'Conversation <span class="mono">([^<]*)</span>', response.text)
        assert title and html.unescape(title.group(1)) == conversation, (conversation, hrefs[0])
        api = httpx.get(ui + "/api/sessions/" + hrefs[0][len("/sessions/"):], headers=AUTH)
        assert api.status_code == 200 and api.json()["conversation_id"] == conversation
    envelope_links = re.findall(r'href="(/envelopes/[^"]+)"', page)
    opened = [httpx.get(_browser_url(ui, h), headers=AUTH) for h in envelope_links]
    headings = [re.search(r'<h1>Envelope <span class="mono">([^<]*)</span>', r.text)
                for r in opened if r.status_code == 200]
    for context_id in CONTEXTS:
        assert any(h and html.unescape(h.group(1)) == context_id for h in headings), context_id


def test_the_token_redirect_stays_on_this_server(ui: str) -> None:
    for path in ("//evil.example/x", "/%2F%2Fevil.example/x", "/\\evil.example"):
        response = httpx.get(ui + path, params={"token": "s3cret"})
        assert response.status_code == 303
        location = response.headers["location"]
        assert location.startswith("/") and not location.startswith(("//", "/\\")), location


def test_odd_bytes_in_the_cookie_or_header_are_a_401_not_a_500(ui: str) -> None:
    for headers in ({"Cookie": "otel_agent_context_token=\u00e9".encode()},
                    {"Authorization": b"Bearer \xff\xfe"},
                    {"Authorization": "Bearer s3cr\u00e9t".encode()}):
        assert httpx.get(ui + "/", headers=headers).status_code == 401, headers


def test_pages_cannot_be_framed(ui: str) -> None:
    policy = httpx.get(ui + "/", headers=AUTH).headers["content-security-policy"]
    assert "frame-ancestors 'none'" in policy and "base-uri 'none'" in policy
