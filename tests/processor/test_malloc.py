"""``serve`` sets glibc's allocator for a long run (``_malloc``): at most two arenas however
many threads allocate, and a fixed mmap threshold; an environment variable that sets one
wins. Each case runs in a fresh interpreter, since the settings are process-wide."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from processor_testkit import REPO

from otel_agent_context.processor import _cli
from otel_agent_context.processor._malloc import ARENA_MAX, MMAP_THRESHOLD

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="glibc's allocator only")

# Eight threads allocate at the same time (outside Python's small-object allocator), then
# glibc's malloc_info lists the arenas ("<heap nr=...>") it made.
_PROBE = r"""
import ctypes, json, sys, tempfile, threading
from otel_agent_context.processor._malloc import tune_malloc

done = tune_malloc() if sys.argv[1] == "tuned" else {}
barrier = threading.Barrier(8)
held = []

def work():
    barrier.wait()
    held.extend(bytearray(4096) for _ in range(500))
    barrier.wait()

threads = [threading.Thread(target=work) for _ in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
libc.fclose.argtypes = [ctypes.c_void_p]
with tempfile.NamedTemporaryFile(suffix=".xml") as out:
    stream = libc.fopen(out.name.encode(), b"w")
    libc.malloc_info(0, stream)
    libc.fclose(stream)
    arenas = open(out.name).read().count("<heap nr=")
print(json.dumps({"done": done, "arenas": arenas}))
"""


def _probe(mode: str, **env: str) -> dict[str, Any]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    result = subprocess.run([sys.executable, "-c", _PROBE, mode], cwd=REPO, text=True,
                            capture_output=True, timeout=60, env={**environ, **env})
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def test_threads_share_two_arenas_once_tuned() -> None:
    untuned = _probe("plain")
    assert untuned["arenas"] >= 8  # glibc's default: an arena per allocating thread (9 here)
    tuned = _probe("tuned")
    assert tuned["done"] == {"arena_max": ARENA_MAX, "mmap_threshold": MMAP_THRESHOLD}
    # measured: 2 in most runs, 3 in some (9 untuned)
    assert tuned["arenas"] <= ARENA_MAX + 1


def test_an_environment_variable_wins() -> None:
    tuned = _probe("tuned", MALLOC_ARENA_MAX="3")
    assert tuned["done"] == {"mmap_threshold": MMAP_THRESHOLD}
    assert tuned["arenas"] <= 4
    both = _probe("tuned", MALLOC_ARENA_MAX="3", MALLOC_MMAP_THRESHOLD_="65536")
    assert both["done"] == {}


def test_serve_tunes_the_allocator_before_it_starts(tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    class Started(Exception):
        pass

    class FakeProcessor:
        def __init__(self, config: Any) -> None:
            calls.append("Processor")
            raise Started

    monkeypatch.setattr("otel_agent_context.processor._malloc.tune_malloc",
                        lambda: calls.append("tune_malloc"))
    monkeypatch.setattr("otel_agent_context.processor._server.Processor", FakeProcessor)
    monkeypatch.setattr(_cli.signal, "signal", lambda *args: None)  # pytest keeps its own
    parser = argparse.ArgumentParser()
    _cli.register(parser.add_subparsers())
    args = parser.parse_args(["serve", "--out", str(tmp_path / "out")])
    with pytest.raises(Started):
        args.func(args)
    assert calls == ["tune_malloc", "Processor"]

