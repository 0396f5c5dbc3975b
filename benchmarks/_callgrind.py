"""Instruction counts under valgrind's callgrind, shared by the ``*_ir.py`` benchmarks: the
parent runs a child command under callgrind with counting off (:func:`run`); the child
counts only around the calls it measures (:func:`count`), one dump per measurement."""

from __future__ import annotations

import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["available", "count", "measure", "ratio", "run"]


def available() -> bool:
    return shutil.which("valgrind") is not None and shutil.which("callgrind_control") is not None


def _control(*flags: str) -> None:
    subprocess.run(["callgrind_control", *flags, str(os.getpid())], check=True,
                   capture_output=True)


def count(fn: Callable[[], Any], calls: int, label: str) -> None:
    """Count the instructions of ``calls`` calls of ``fn`` into the dump named ``label``,
    with the garbage collector off meanwhile (a collection lands in one measurement or
    another by chance)."""
    gc.collect()
    gc.disable()
    try:
        _control("-z")
        _control("-i", "on")
        for _ in range(calls):
            fn()
        _control("-i", "off")
    finally:
        gc.enable()
    _control(f"--dump={label}")


def measure(fn: Callable[[], Any], warmup: int, calls: int, label: str, exporter: Any,
            expect_spans: str | None) -> None:
    """Warm ``fn`` up, then :func:`count` it; with ``expect_spans`` (a name for the message),
    say on stderr when the counted calls recorded no span (an instrumentor that missed)."""
    for _ in range(warmup):
        fn()
    exporter.clear()
    count(fn, calls, label)
    if expect_spans and not exporter.get_finished_spans():
        print(f"{expect_spans} recorded nothing", file=sys.stderr)
    exporter.clear()


def run(cmd: Sequence[str], env: Mapping[str, str], per: int) -> dict[str, float]:
    """Run ``cmd`` under callgrind, counting off at start; the instructions of each dump
    the child made, by its label, divided by ``per``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cg.out"
        proc = subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                               f"--callgrind-out-file={out}", *cmd], env=dict(env),
                              capture_output=True, text=True, timeout=3600)
        if proc.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} failed under callgrind:\n{proc.stderr[-3000:]}")
        counts: dict[str, float] = {}
        for dump in Path(tmp).glob("cg.out.*"):
            text = dump.read_text(errors="replace")
            name = re.search(r"^desc: Trigger: dump (\S+)", text, re.M)
            total = re.search(r"^totals: (\d+)", text, re.M)
            if name and total:
                counts[name[1]] = int(total[1]) / per
        return counts


def ratio(a: float | None, b: float | None, goal: float) -> str:
    """``a / b`` for a goals table, with whether it is within ``goal``."""
    if a is None or b is None or b <= 0:
        return "–"
    return f"{a / b:.2f} {'met' if a / b <= goal else 'MISSED'}"
