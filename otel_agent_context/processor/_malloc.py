"""glibc's allocator set for a long-running ``serve`` (``serve`` calls :func:`tune_malloc`).

Measured under the soak (benchmarks/soak.md, 8 exporters, 100 s): with glibc's defaults the
memory glibc held for ``serve`` grew 20 -> 42 MiB, half of it free but in pieces no trim
gives back (``malloc_trim(0)`` returned about 1 MiB), and kept growing. Two settings stop it:

- ``M_ARENA_MAX`` 2: every thread that allocates (gRPC's pool, the HTTP server, the
  emitter, the sinks) otherwise gets an arena of its own, up to 8 a core, each keeping its
  own free pieces;
- ``M_MMAP_THRESHOLD`` 128 KiB, fixed: glibc starts there but raises the threshold each time
  a large block is freed, after which large request bodies and batches are carved from the
  arenas and leave holes; fixed, they are mapped and unmapped whole.

With both, glibc held 17-19 MiB from 5 s to the end (1-3 MiB of it free). Both apply to what is
allocated from then on, so they are set before ``serve`` starts any thread. An environment
variable that already sets one (``MALLOC_ARENA_MAX``, ``MALLOC_MMAP_THRESHOLD_``) wins; on
another C library (musl, macOS) nothing is done.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sys
from collections.abc import Mapping

__all__ = ["ARENA_MAX", "MMAP_THRESHOLD", "tune_malloc"]

log = logging.getLogger(__name__)

#: mallopt parameters (glibc's malloc.h)
_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8

ARENA_MAX = 2
MMAP_THRESHOLD = 128 * 1024


def _glibc() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - present in glibc only
    except (OSError, AttributeError):
        return None
    return libc


def tune_malloc(environ: Mapping[str, str] = os.environ) -> dict[str, int]:
    """Set glibc's arena count and mmap threshold for this process; returns what was set
    (``{}`` off glibc, or when the environment sets both)."""
    libc = _glibc()
    if libc is None:
        return {}
    mallopt = libc.mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    done: dict[str, int] = {}
    for variable, param, value, name in (
        ("MALLOC_ARENA_MAX", _M_ARENA_MAX, ARENA_MAX, "arena_max"),
        ("MALLOC_MMAP_THRESHOLD_", _M_MMAP_THRESHOLD, MMAP_THRESHOLD, "mmap_threshold"),
    ):
        if variable in environ:
            continue
        if mallopt(param, value) == 1:
            done[name] = value
    log.debug("malloc: %s", done)
    return done

