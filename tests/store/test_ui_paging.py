"""The web page with more than a page of envelopes, and turns with hundreds of omitted items:
the envelope list pages (``?offset=``, ``next_offset`` in the API) keeping its filters, and a
turn's long tables stop at a few dozen rows with an "N more" link that shows that turn in
full."""

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

ENVELOPES = 23
OMITTED = 130  # in each turn of the long conversation
TURNS = 57  # of the conversation "turns": more than the sessions API's page of 50


def _bundle(context_id: str, conversation: str, second: int, *, agent: str = "a",
            omitted: int = 0) -> dict[str, Any]:
    return {"context_envelope": {
                "context_id": context_id, "telemetry_refs": [{"trace_id": "t-" + context_id}],
                "metadata": {"gen_ai.conversation.id": conversation, "gen_ai.agent.name": agent},
                "created_at": f"2026-01-01T00:{second // 60:02d}:{second % 60:02d}Z"},
            "context_selections": [{"omitted_item_refs": [
                {"item_id": f"{context_id}-item-{n:03d}", "reason": "budget"}
                for n in range(omitted)]}]}


@pytest.fixture
def ui() -> Iterator[str]:
    store = open_store(":memory:")
    store.write([_bundle(f"env-{n:02d}", "many", n, agent="a" if n % 2 else "b")
                 for n in range(ENVELOPES)])
    for conversation in ("long", ".."):
        store.write([_bundle(f"{conversation}-turn-{n}", conversation, 100 + n,
                             omitted=OMITTED) for n in range(3)])
    store.write([_bundle(f"turn-{n:02d}", "turns", 200 + n) for n in range(TURNS)])
    server = UiServer(store, Endpoint("127.0.0.1", 0))
    yield f"http://127.0.0.1:{server.start()}"
    server.stop()
    store.close()


def test_the_envelope_api_pages_with_next_offset(ui: str) -> None:
    seen: list[str] = []
    offset: int | None = 0
    pages = 0
    while offset is not None:
        page = httpx.get(ui + "/api/envelopes", params={"conversation": "many", "limit": 5,
                                                        "offset": offset}).json()
        assert len(page["envelopes"]) <= 5
        seen += [e["context_id"] for e in page["envelopes"]]
        offset = page["next_offset"]
        pages += 1
    assert pages == 5  # 23 envelopes, 5 a page
    assert seen == [f"env-{n:02d}" for n in reversed(range(ENVELOPES))]  # newest first, once


def test_the_envelope_list_links_to_its_next_and_previous_pages_with_its_filters(
        ui: str) -> None:
    url = ui + "/?agent=a&conversation=many&limit=4"
    listed: list[str] = []
    for _ in range(10):
        page = httpx.get(url).text
        table = page[page.index('<table id="envelopes">'):]
        listed += re.findall(r'href="/envelopes/([^"]+)"', table[:table.index("</table>")])
        found = re.search(r'<a rel="next" href="([^"]+)"', page)
        if found is None:
            break
        assert "agent=a" in html.unescape(found.group(1))
        url = urljoin(ui + "/", html.unescape(found.group(1)))
    odd = [f"env-{n:02d}" for n in reversed(range(ENVELOPES)) if n % 2]
    assert listed == odd  # agent a's 11 envelopes over 3 pages, none twice, none lost
    assert 'rel="prev"' in page and "offset=4" in page


def _turn(page: str, number: int) -> str:
    start = page.index(f'id="turn-{number}"')
    end = page.find('<section class="turn"', start)
    return page[start:end if end != -1 else len(page)]


@pytest.mark.parametrize("conversation", ["long", ".."])
def test_a_long_omitted_table_stops_with_a_link_to_the_whole_turn(ui: str,
                                                                   conversation: str) -> None:
    index = httpx.get(ui + "/").text
    href = next(h for h, text in re.findall(r'<a href="(/sessions/[^"]+)">([^<]*)</a>', index)
                if html.unescape(text) == conversation)
    page = httpx.get(urljoin(ui + "/", html.unescape(href))).text
    for number in (1, 2, 3):
        turn = _turn(page, number)
        assert f"Omitted: {OMITTED}" in turn
        assert turn.count(f"{conversation}-turn-{number - 1}-item-") == 50
    more = re.search(r'<a href="([^"]+)">(\d+) more</a>', _turn(page, 2))
    assert more is not None and more.group(2) == str(OMITTED - 50)
    full = httpx.get(urljoin(ui + href, html.unescape(more.group(1))))
    assert full.status_code == 200
    title = re.search(r'Conversation <span class="mono">([^<]*)</span>', full.text)
    assert title is not None and html.unescape(title.group(1)) == conversation
    assert _turn(full.text, 2).count(f"{conversation}-turn-1-item-") == OMITTED
    assert "<details open>" in _turn(full.text, 2)
    assert _turn(full.text, 1).count(f"{conversation}-turn-0-item-") == 50  # the others: capped


def test_the_sessions_api_pages_its_turns(ui: str) -> None:
    first = httpx.get(ui + "/api/sessions/turns").json()
    assert first["turn_count"] == TURNS and len(first["turns"]) == 50  # the default page
    assert first["next_offset"] == 50
    rest = httpx.get(ui + "/api/sessions/turns", params={"offset": 50}).json()
    assert len(rest["turns"]) == TURNS - 50 and rest["next_offset"] is None
    numbers: list[int] = []
    offset: int | None = 0
    while offset is not None:
        page = httpx.get(ui + "/api/sessions/turns", params={"limit": 10,
                                                             "offset": offset}).json()
        assert len(page["turns"]) <= 10
        numbers += [t["number"] for t in page["turns"]]
        offset = page["next_offset"]
    assert numbers == list(range(1, TURNS + 1))  # in order, none twice, none lost
    assert [t["envelope"]["context_id"] for t in rest["turns"]] == [
        f"turn-{n:02d}" for n in range(50, TURNS)]
    huge = httpx.get(ui + "/api/sessions/turns", params={"limit": 10**9}).json()
    assert len(huge["turns"]) == TURNS  # a limit is capped (at 1,000), never an error


@pytest.mark.parametrize(("conversation", "path"), [("long", "long"), ("..", "?id=..")])
def test_the_sessions_api_caps_a_turns_long_lists_with_a_link_to_it_in_full(
        ui: str, conversation: str, path: str) -> None:
    api = httpx.get(f"{ui}/api/sessions/{path}").json()
    assert api["conversation_id"] == conversation and api["next_offset"] is None
    for turn in api["turns"]:
        assert len(turn["omitted"]) == 50 and turn["more"] == {"omitted": OMITTED - 50}
        assert [o["item_id"] for o in turn["omitted"]] == [
            f"{conversation}-turn-{turn['number'] - 1}-item-{n:03d}" for n in range(50)]
    full = httpx.get(urljoin(ui + "/", api["turns"][1]["full_href"])).json()
    (turn,) = full["turns"]
    assert turn["number"] == 2 and full["conversation_id"] == conversation
    assert len(turn["omitted"]) == OMITTED and "more" not in turn and "full_href" not in turn
    small = httpx.get(ui + "/api/sessions/turns", params={"limit": 1}).json()["turns"][0]
    assert "more" not in small and "full_href" not in small  # nothing left out
