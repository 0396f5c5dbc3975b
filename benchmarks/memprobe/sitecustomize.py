"""A memory probe for ``serve`` under the soak (benchmarks/soak.md): put this folder on
``PYTHONPATH`` and set ``MEMPROBE_DIR``, and every Python process started with them (``serve``
and the store's child) appends a JSON line to ``MEMPROBE_DIR/<pid>.jsonl`` every
``MEMPROBE_EVERY`` seconds (default 5)::

    python benchmarks/soak_bench.py --seconds 120 --kills 1 --workers 16 \\
        --serve-env PYTHONPATH=benchmarks/memprobe --serve-env MEMPROBE_DIR=/tmp/probe

Each line: RSS (``VmRSS``, ``RssAnon``, ``RssFile``), threads; glibc's ``mallinfo2``
(``glibc_arena``: bytes its arenas took from the system, ``glibc_free``: free in them,
``glibc_mmap``: live blocks mapped on their own); Python's small-object allocator
(``py_arenas_bytes``, ``py_allocated``, ``py_available``: free in arenas it keeps, from
``sys._debugmallocstats``); and in ``serve``, what each part of ``--max-memory`` holds with
the queue's length. ``MEMPROBE_TRACE=1`` also starts ``tracemalloc`` (8 frames) and dumps a
snapshot each time (compare two with ``Snapshot.load(a).compare_to(...)``); it slows
``serve`` several times over, so the queue fills: use it to name what is held, not to size it.
``MEMPROBE_TRIM=1`` calls ``malloc_trim(0)`` each time and records what it gave back.
Not for production: it reads the interpreter's internals.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import sys
import tempfile
import threading
import time
from typing import Any

_DIR = os.environ.get("MEMPROBE_DIR")


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _status() -> dict[str, int]:
    out = {}
    with open(f"/proc/{os.getpid()}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                out[key + "_kib"] = int(value.split()[0])
            elif key == "Threads":
                out["threads"] = int(value)
    return out


def _pymalloc() -> dict[str, int]:
    """Python's allocator, from ``sys._debugmallocstats`` (it writes to fd 2)."""
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        try:
            os.dup2(tmp.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        text = tmp.read().decode(errors="replace")
    out: dict[str, int] = {}
    for label, key in (("bytes/arena", "py_arenas_bytes"),
                       ("bytes in allocated blocks", "py_allocated"),
                       ("bytes in available blocks", "py_available")):
        for line in text.splitlines():
            if label in line:
                out[key] = int(line.split("=")[-1].strip().replace(",", ""))
                break
    return out


def _pipeline(cache: dict[str, Any]) -> dict[str, Any]:
    pipeline = cache.get("pipeline")
    if pipeline is None:
        pipeline = cache["pipeline"] = next(
            (o for o in gc.get_objects() if type(o).__name__ == "Pipeline"), None)
    if pipeline is None:
        return {}
    return {"held": pipeline.memory_held(), "queue": len(pipeline._queue),
            "finished_envelopes": pipeline.buffer.finished_envelopes}


def _run(directory: str, every: float, trace: bool, trim: bool) -> None:
    libc = ctypes.CDLL(None)
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is not None:
        mallinfo2.restype = _MallInfo2
    began = time.time()
    path = os.path.join(directory, f"{os.getpid()}.jsonl")
    cache: dict[str, Any] = {}
    n = 0
    while True:
        time.sleep(every)
        n += 1
        record: dict[str, Any] = {"t": round(time.time() - began, 1), "argv": sys.argv[:2],
                                  **_status(), **_pymalloc()}
        if mallinfo2 is not None:
            info = mallinfo2()
            record.update(glibc_arena=info.arena, glibc_free=info.fordblks,
                          glibc_mmap=info.hblkhd)
        with contextlib.suppress(Exception):
            record.update(_pipeline(cache))
        if trim:
            before = _status()["VmRSS_kib"]
            libc.malloc_trim(0)
            record["trim_gave_kib"] = before - _status()["VmRSS_kib"]
        if trace:
            import tracemalloc

            record["traced"] = tracemalloc.get_traced_memory()[0]
            tracemalloc.take_snapshot().dump(os.path.join(directory,
                                                          f"{os.getpid()}-{n:03d}.snap"))
        with open(path, "a") as f:
            f.write(json.dumps(record) + "\n")


if _DIR:
    _trace = os.environ.get("MEMPROBE_TRACE") == "1"
    if _trace:
        import tracemalloc

        tracemalloc.start(8)
    threading.Thread(target=_run, name="memprobe", daemon=True,
                     args=(_DIR, float(os.environ.get("MEMPROBE_EVERY", "5")), _trace,
                           os.environ.get("MEMPROBE_TRIM") == "1")).start()
