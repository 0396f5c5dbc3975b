"""The web page in a real browser: Debian's chromium, driven headless by Playwright, against
``otel-agent-context demo --ui`` (which keeps serving until Ctrl-C)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import store_expect as X
from conftest import DEMO_TURNS, REPO, read_jsonl

CHROMIUM = "/usr/bin/chromium"
#: As root, and with no network beyond loopback (the machine's notes): no sandbox, and none
#: of chromium's background connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


@pytest.fixture(scope="module")
def demo_ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    out = tmp_path_factory.mktemp("demo-ui") / "out"
    log = out.parent / "demo.log"
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "otel_agent_context", "demo", "--out", str(out), "--turns",
             str(DEMO_TURNS), "--ui", "127.0.0.1:0"], cwd=REPO, stdout=sink,
            stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "serving the web page until Ctrl-C" not in log.read_text(errors="replace"):
            assert process.poll() is None, log.read_text(errors="replace")
            assert time.monotonic() < deadline, log.read_text(errors="replace")
            time.sleep(0.1)
        text = log.read_text()
        base = re.search(r"web page: (http://[\d.:]+)/", text).group(1)
        assert re.search(rf"session:  {re.escape(base)}/sessions/conv-0000", text)
        yield base, out
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(30) == 0  # Ctrl-C ends demo --ui cleanly


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: apt-get install chromium (scripts/test does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def test_the_session_page_in_chromium(demo_ui: tuple[str, Path], browser: Any,
                                      tmp_path: Path) -> None:
    base, out = demo_ui
    bundles = X.in_time_order(read_jsonl(out))
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    page.goto(base + "/")
    page.click("text=conv-0000")  # from the list of conversations to the session
    page.wait_for_selector("section.turn")
    assert page.url.endswith("/sessions/conv-0000")
    # every turn, in order
    turns = page.locator("section.turn")
    assert turns.count() == DEMO_TURNS
    for index, bundle in enumerate(bundles):
        assert X.key(bundle)[1] in turns.nth(index).locator("header").inner_text()
    # a diff between two turns: what turn 2 added and removed
    second = turns.nth(1)
    added = [i for i in X.window(bundles[1]) if i not in X.window(bundles[0])]
    removed = [i for i in X.window(bundles[0]) if i not in X.window(bundles[1])]
    assert "Since turn 1" in second.inner_text()
    assert second.locator("li.added").first.inner_text() == f"+ {added[0]}"
    assert second.locator("li.removed").first.inner_text() == f"− {removed[0]}"
    # an omitted item with its reason, behind a click
    item, reason = sorted(X.omitted(bundles[0]))[0]
    first = turns.nth(0)
    row = first.locator("div.omitted tr", has_text=item).first
    assert not row.is_visible()
    first.locator("div.omitted summary").click()
    assert row.is_visible() and reason in row.inner_text()
    # a truncation, where it happened
    where = next(n for n, b in enumerate(bundles) if X.truncated(b))
    truncated_id = next(iter(X.truncated(bundles[where])))
    assert truncated_id in turns.nth(where).locator("div.truncated").inner_text()
    # the window bar is drawn to scale: a bar segment per context kind of the turn
    assert first.locator(".bar > span").count() == len(X.tokens_by_kind(bundles[0]))
    shot = tmp_path / "session.png"
    page.screenshot(path=str(shot), full_page=False)
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000
    # from a turn to its envelope's full record
    first.locator("header a.mono").click()
    page.wait_for_selector("#bundle")
    assert X.key(bundles[0])[1] in page.locator("h1").inner_text()
    page.close()


def test_the_envelope_list_filters_in_chromium(demo_ui: tuple[str, Path], browser: Any) -> None:
    base, out = demo_ui
    bundles = read_jsonl(out)
    page = browser.new_page()
    page.goto(base + "/")
    page.select_option("select[name=overflow]", "yes")
    page.click("button[type=submit]")
    page.wait_for_load_state()
    assert "overflow=yes" in page.url
    shown = set(page.locator("#envelopes a.mono").all_inner_texts())
    assert shown == {X.key(b)[1] for b in bundles if b["context_budgets"][0]["overflow"]}
    page.close()


def test_the_committed_screenshot_exists() -> None:
    shot = REPO / "docs" / "img" / "session-timeline.png"
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "docs/img/session-timeline.png" in (REPO / "README.md").read_text(encoding="utf-8")
    assert shutil.which("chromium") or os.access(CHROMIUM, os.X_OK)
