"""The web page and its JSON API over real HTTP on loopback: pages, filters, 404s, the
bearer token (header and cookie), and escaping of ids that came from someone's telemetry."""

from __future__ import annotations

import copy
import html
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import store_expect as X
from conftest import DEMO_TURNS

from otel_agent_context._store import open_store
from otel_agent_context._store._session import session
from otel_agent_context.processor._config import Endpoint
from otel_agent_context.processor._ui import UiServer


@pytest.fixture
def ui(demo_out: Path, tmp_path: Path) -> Iterator[tuple[str, Any]]:
    shutil.copy(demo_out / "context.db", tmp_path / "context.db")
    store = open_store(str(tmp_path / "context.db"))
    server = UiServer(store, Endpoint("127.0.0.1", 0),
                      trace_url_template="http://jaeger.example/trace/{trace_id}")
    port = server.start()
    yield f"http://127.0.0.1:{port}", store
    server.stop()
    store.close()


def _ids(page: str, prefix: str) -> set[str]:
    return {html.unescape(m) for m in re.findall(rf'href="{prefix}([^"]+)"', page)}


def test_index_lists_conversations_and_filters_envelopes(ui: tuple[str, Any],
                                                         demo_bundles: list) -> None:
    base, _ = ui
    page = httpx.get(base + "/").text
    conversation = X.conversation(demo_bundles[0])
    assert f"/sessions/{conversation}" in page
    assert _ids(page, "/envelopes/") == {X.key(b)[1] for b in demo_bundles}
    overflowed = {X.key(b)[1] for b in demo_bundles if b["context_budgets"][0]["overflow"]}
    assert overflowed and len(overflowed) < len(demo_bundles)
    filtered = httpx.get(base + "/", params={"overflow": "yes"}).text
    assert _ids(filtered, "/envelopes/") == overflowed
    blocking = {X.key(b)[1] for b in demo_bundles
                if any(m["severity"] == "blocking" for m in b.get("missing_context", []))}
    assert _ids(httpx.get(base + "/", params={"blocking": "yes"}).text,
                "/envelopes/") == blocking
    reason = {X.key(b)[1] for b in demo_bundles if any(r == "budget" for _, r in X.omitted(b))}
    assert _ids(httpx.get(base + "/", params={"reason": "budget"}).text,
                "/envelopes/") == reason
    none = httpx.get(base + "/", params={"agent": "nobody"}).text
    assert "No envelope matches" in none


def test_session_page_shows_every_turn_and_what_changed(ui: tuple[str, Any],
                                                        demo_bundles: list) -> None:
    base, _ = ui
    ordered = X.in_time_order(demo_bundles)
    response = httpx.get(f"{base}/sessions/{X.conversation(ordered[0])}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    page = response.text
    assert len(re.findall(r'<section class="turn" id="turn-\d+">', page)) == DEMO_TURNS
    for bundle in ordered:
        assert X.key(bundle)[1] in page
        assert f"http://jaeger.example/trace/{X.key(bundle)[0]}" in page
    truncated = next(t for b in ordered for t in X.truncated(b))
    assert re.search(rf'<div class="truncated">.*?{re.escape(truncated)}', page, re.S)
    second_added = [i for i in X.window(ordered[1]) if i not in X.window(ordered[0])]
    assert f'<li class="added mono">+ {html.escape(second_added[0])}</li>' in page
    assert "Since turn 1" in page
    item, reason = sorted(X.omitted(ordered[0]))[0]
    assert re.search(rf"<td class=\"mono\">{re.escape(html.escape(item))}</td><td>[^<]*</td>"
                     rf"<td>{reason}", page)
    assert "loss:" in page and "blocking" in page
    never = [i for b in ordered for s in b.get("context_selections", [])
             for i in s.get("not_injected_item_refs", [])]
    assert never and re.search(rf'<div class="not-injected">.*?{re.escape(never[0])}', page,
                               re.S)


def test_envelope_page_and_json_api(ui: tuple[str, Any], demo_bundles: list) -> None:
    base, store = ui
    bundle = demo_bundles[0]
    context_id = X.key(bundle)[1]
    page = httpx.get(f"{base}/envelopes/{context_id}").text
    assert context_id in page and "Full record" in page
    assert httpx.get(f"{base}/api/envelopes/{context_id}").json() == bundle
    listed = httpx.get(f"{base}/api/envelopes", params={"limit": 3}).json()["envelopes"]
    assert len(listed) == 3
    conversation = X.conversation(bundle)
    api = httpx.get(f"{base}/api/sessions/{conversation}").json()
    assert [t["window"] for t in api["turns"]] == [t.window for t in session(store,
                                                                             conversation)]
    assert httpx.get(f"{base}/api/conversations").json()["conversations"][0]["turns"] == \
        DEMO_TURNS


def test_unknown_things_are_404_and_writes_are_refused(ui: tuple[str, Any]) -> None:
    base, _ = ui
    assert httpx.get(f"{base}/sessions/nope").status_code == 404
    assert httpx.get(f"{base}/envelopes/nope").status_code == 404
    assert httpx.get(f"{base}/api/envelopes/nope").status_code == 404
    assert httpx.get(f"{base}/api/sessions/nope").json()["error"]
    assert httpx.get(f"{base}/elsewhere").status_code == 404
    assert httpx.post(f"{base}/", content=b"x").status_code == 405


def test_ids_from_telemetry_are_escaped(ui: tuple[str, Any], demo_bundles: list) -> None:
    base, store = ui
    evil = copy.deepcopy(demo_bundles[0])
    script = "<script>alert(1)</script>"
    evil["context_envelope"]["context_id"] = 'ctx"><img src=x onerror=alert(1)>'
    evil["context_envelope"]["metadata"]["gen_ai.conversation.id"] = "conv" + script
    evil["context_envelope"]["metadata"]["gen_ai.agent.name"] = script
    evil["context_selections"][0]["omitted_item_refs"][0]["item_id"] = script
    evil["context_selections"][0]["omitted_item_refs"][0]["detail"] = script
    evil["context_assemblies"][0]["ordered_blocks"][0]["context_kind"] = "x;background:url(x)"
    store.write([evil])
    for path in ("/", "/sessions/conv%3Cscript%3Ealert(1)%3C%2Fscript%3E",
                 "/envelopes/ctx%22%3E%3Cimg%20src%3Dx%20onerror%3Dalert(1)%3E"):
        response = httpx.get(base + path)
        assert response.status_code == 200, path
        assert "<script>alert" not in response.text and "<img src=x" not in response.text
        assert "&lt;script&gt;" in response.text


def test_the_bearer_token_guards_pages_and_api(demo_out: Path, tmp_path: Path) -> None:
    shutil.copy(demo_out / "context.db", tmp_path / "context.db")
    with open_store(str(tmp_path / "context.db")) as store:
        server = UiServer(store, Endpoint("127.0.0.1", 0), bearer_token="s3cret")
        base = f"http://127.0.0.1:{server.start()}"
        try:
            assert httpx.get(base + "/").status_code == 401
            api = httpx.get(base + "/api/conversations")
            assert api.status_code == 401 and api.json()["error"]
            assert httpx.get(base + "/api/conversations",
                             headers={"Authorization": "bearer s3cret"}).status_code == 200
            assert httpx.get(base + "/", params={"token": "wrong"}).status_code == 401
            with httpx.Client(base_url=base) as browser:
                login = browser.get("/sessions/x", params={"token": "s3cret"})
                assert login.status_code == 303 and login.headers["location"] == "/sessions/x"
                cookie = login.headers["set-cookie"]
                assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
                assert "s3cret" not in cookie  # the cookie is derived, not the token itself
                assert browser.get("/").status_code == 200
        finally:
            server.stop()


def test_serve_ui_needs_a_store_and_a_free_port(tmp_path: Path) -> None:
    from conftest import run_cli

    no_store = run_cli("serve", "--out", str(tmp_path / "out"), "--store", "off", "--ui",
                       "127.0.0.1:0", check=False, timeout=60)
    assert no_store.returncode == 2 and "ui.endpoint (--ui)" in no_store.stderr
    bad = run_cli("serve", "--out", str(tmp_path / "out"), "--store", "mysql://x",
                  check=False, timeout=60)
    assert bad.returncode == 2 and "store.url (--store)" in bad.stderr


def test_ids_with_percent_signs_and_slashes_reach_their_pages(ui: tuple[str, Any],
                                                              demo_bundles: list) -> None:
    from urllib.parse import quote

    base, store = ui
    odd = copy.deepcopy(demo_bundles[0])
    odd["context_envelope"]["context_id"] = "ctx/50%41"
    odd["context_envelope"]["metadata"]["gen_ai.conversation.id"] = "conv/a%2Fb 100%"
    store.write([odd])
    session_page = httpx.get(base + "/sessions/" + quote("conv/a%2Fb 100%", safe=""))
    assert session_page.status_code == 200 and "ctx/50%41" in session_page.text
    envelope_page = httpx.get(base + "/api/envelopes/" + quote("ctx/50%41", safe=""))
    assert envelope_page.json()["context_envelope"]["context_id"] == "ctx/50%41"
    # the page links to them the same way
    assert 'href="/sessions/conv%2Fa%252Fb%20100%25"' in httpx.get(base + "/").text
