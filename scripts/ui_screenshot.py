#!/usr/bin/env python3
"""Rewrite docs/img/session-timeline.png: the demo's session page in Debian's chromium.

    .venv/bin/python scripts/ui_screenshot.py [--turns 9] [--out docs/img/session-timeline.png]
"""

from __future__ import annotations

import argparse
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=9)
    parser.add_argument("--out", default=str(REPO / "docs" / "img" / "session-timeline.png"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "demo.log"
        with open(log, "wb") as sink:
            demo = subprocess.Popen([sys.executable, "-m", "otel_agent_context", "demo", "--out",
                                     str(Path(tmp) / "out"), "--turns", str(args.turns), "--ui",
                                     "127.0.0.1:0"], stdout=sink, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 60
            while "serving the web page" not in log.read_text(errors="replace"):
                if demo.poll() is not None or time.monotonic() > deadline:
                    print(log.read_text(errors="replace"), file=sys.stderr)
                    return 1
                time.sleep(0.1)
            base = re.search(r"web page: (http://[\d.:]+)/", log.read_text()).group(1)
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path="/usr/bin/chromium",
                                                     args=ARGS)
                page = browser.new_page(viewport={"width": 1280, "height": 1500})
                page.goto(f"{base}/sessions/conv-0000")
                page.screenshot(path=args.out)
                browser.close()
        finally:
            demo.send_signal(signal.SIGINT)
            demo.wait(30)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
