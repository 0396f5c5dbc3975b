"""``--max-memory``: one byte budget for what the processor holds, split into parts.

The budget (``memory.max_bytes``) covers the data the processor keeps between requests:
spans and events of envelopes being assembled, finished envelopes waiting for the sinks,
log-based events waiting for their span, requests waiting for the ``--forward`` next hop,
and the decode cache. Each part gets a fixed share:

=============  =====  =====================================================================
part           share  when it is reached
=============  =====  =====================================================================
buffer          40 %  the oldest envelope is finished ``partial`` (reason ``evicted``) and
                      moves to the queue
queue           20 %  buffer and queue share their 60 %: a request whose spans would take
                      the two beyond it is refused (UNAVAILABLE / 503 with RetryInfo)
events          10 %  a logs request whose events would take the waiting ones beyond it is
                      refused likewise
forward         10 %  a request that would take the forward queue beyond it is refused
                      likewise
decode_cache     5 %  the cache is emptied (it only saves work)
remembered      15 %  the keys of written envelopes (two thirds) and of the spans of
                      written envelopes with log-based events (one third), remembered so
                      that retries stay duplicates: the oldest is forgotten
                      (``KEY_COST`` bytes each, plus a long context.id's size),
                      before ``buffer.dedupe_window``
=============  =====  =====================================================================

Every check is made before the request is accepted (before its WAL record), with its own
size, under the lock the additions are made under: a request never takes a part beyond its
cap. A request that could never fit (its spans alone above the buffer and queue's share, or
its body above the forward share) is refused for good as too large (413 /
RESOURCE_EXHAUSTED without RetryInfo, which clients do not retry).

Sizes are estimates of what Python holds, measured with ``tracemalloc`` (see
``SPAN_OVERHEAD``): a span costs its encoded size plus about a kilobyte of objects, and
about 256 bytes more per event. Not counted: the requests being decoded (bounded by
``receivers.max_request_bytes`` times the receivers' threads, each held as its body and up
to two parsed copies while decoded) and the interpreter itself
(about 50 MB).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from ..exceptions import ConfigError
from ..rebuild._completion import KEY_COST

__all__ = [
    "DEFAULT_MAX_MEMORY",
    "EVENT_COST",
    "KEY_COST",
    "MIN_MAX_MEMORY",
    "PARTS",
    "SHARES",
    "SPAN_OVERHEAD",
    "MemoryCaps",
    "parse_byte_size",
]

#: 256 MiB: fits a container of 512 MiB with the interpreter and the receivers' threads.
DEFAULT_MAX_MEMORY = 256 * 1024 * 1024
#: Below this the parts could not hold one ordinary request.
MIN_MAX_MEMORY = 1024 * 1024
#: Bytes a buffered span costs beyond its encoding (SpanView, dicts, strings; measured:
#: 1,030 for a span of one 10 kB attribute, 840 for one of 42 small ones).
SPAN_OVERHEAD = 1024
#: Bytes each event on a span costs (EventView and its attributes; measured 262 for events
#: of two attributes).
EVENT_COST = 256


#: part -> share of ``memory.max_bytes`` (they add up to 1).
SHARES: dict[str, float] = {
    "buffer": 0.40,
    "queue": 0.20,
    "events": 0.10,
    "forward": 0.10,
    "decode_cache": 0.05,
    "remembered": 0.15,
}
PARTS = tuple(SHARES)

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(?:([kmgt])(i)?)?b?\s*$", re.IGNORECASE)
_POWERS = {"k": 1, "m": 2, "g": 3, "t": 4}


def parse_byte_size(key: str, value: Any) -> int:
    """A number of bytes: an integer, or a number with a unit: ``512MiB``, ``1GiB``,
    ``64Mi`` (powers of 1024), ``500MB``, ``2G`` (powers of 1000), ``1_000_000``."""
    if isinstance(value, bool):
        raise ConfigError(key, f"expected a size in bytes, got {value!r}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str):
        match = _SIZE.match(value.replace("_", ""))
        if match is None:
            raise ConfigError(key, f"expected a size in bytes (like 268435456, 256MiB or "
                              f"1GiB), got {value!r}")
        digits, unit, binary = match.groups()
        base = 1024 if binary else 1000
        size = float(digits) * base ** _POWERS[unit.lower()] if unit else float(digits)
        if size != int(size):
            raise ConfigError(key, f"not a whole number of bytes: {value!r}")
        number = int(size)
    else:
        raise ConfigError(key, f"expected a size in bytes, got {value!r}")
    if number < MIN_MAX_MEMORY:
        raise ConfigError(key, f"must be at least {MIN_MAX_MEMORY} bytes (1MiB), got "
                          f"{value!r}")
    return number


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryCaps:
    """The byte cap of each part of one ``memory.max_bytes`` budget."""

    total: int
    buffer: int
    queue: int
    events: int
    forward: int
    decode_cache: int
    remembered: int

    @classmethod
    def split(cls, total: int) -> MemoryCaps:
        return cls(total, **{part: int(total * share) for part, share in SHARES.items()})

    @property
    def envelopes(self) -> int:
        """What the buffer and the queue hold together at most."""
        return self.buffer + self.queue

    @property
    def remembered_envelopes(self) -> int:
        """Keys of written envelopes that fit in two thirds of the remembered part."""
        return max(1, self.remembered * 2 // 3 // KEY_COST)

    @property
    def remembered_spans(self) -> int:
        """Keys of spans (of envelopes with log-based events) that fit in the last third."""
        return max(1, self.remembered // 3 // KEY_COST)

    def by_part(self) -> dict[str, int]:
        return {part: getattr(self, part) for part in PARTS}
