"""Which items a block carries: block source refs found in process, by content.

An envelope remembers the text of the items it selected, and of the items it surfaced that
no selection has judged yet (an MCP resource read, a prompt fetched). When a block of an
assembly is recorded with its text, every remembered item whose text the block contains
(whitespace normalised) is one of the block's sources: ``context.block.source_item_refs``,
ids only. The texts are compared here and never exported, whatever the content-capture
switch says.

Bounded: an item shorter than :data:`MIN_CHARS` (normalised) is a source only of a block
whose whole text it is (a "yes" is inside every prompt); at most :data:`MAX_ITEMS` items
are compared and :data:`MAX_TEXTS` texts remembered per envelope; the blocks of one call are
searched together, one substring search per item over their joined text; a block already
searched (same digest, same items) is not searched again. An envelope with nothing to
compare costs nothing more.

Normalising a block's whitespace (a split and a join) cost most of a search, so the blocks are
searched as they are first: an item's normalised text found in a block's own text is in the
block's normalised text too (its words are separated by single spaces there as well). Only a
block that holds the item's probe, the longer of its first and last words (every word of a
normalised item that a normalised block contains is in the block's own text), without
holding its text as it is is normalised and searched again; a block shorter than an item's
text never holds it. Normalised texts are remembered beside the digests (``_digest``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

from ._digest import recall, remember

__all__ = ["MAX_ITEMS", "MAX_TEXTS", "MIN_CHARS", "Links", "normalise"]

#: Shortest item text (whitespace normalised) compared with blocks.
MIN_CHARS = 24
#: Items compared with blocks per envelope (the first ones; later ones are not linked).
MAX_ITEMS = 256
#: Item texts remembered per envelope (surfaced candidates included).
MAX_TEXTS = 1024
#: Blocks whose result is remembered per envelope (by digest).
_MAX_CACHE = 4096
#: Between the blocks of the joined text: never inside a normalised item text.
_SEP = "\x00"
#: The memo key of a normalised text (beside the digests' keys: texts and tuples of them).
_NORMALISED = "otel_agent_context.links.normalised"

#: One block to search: (its item id, its digest or None, its text or None).
BlockText = tuple[str, str | None, str | None]


def normalise(text: str) -> str:
    """``text`` with every run of whitespace as one space, none at either end (remembered
    for the texts seen lately, beside their digests: an item or a block of history is
    compared again turn after turn)."""
    key = (_NORMALISED, text)
    found = recall(key)
    if found is None:
        found = " ".join(text.split())
        remember(key, 2 * len(text), found)
    return found  # type: ignore[no-any-return]


class Links:
    """The item texts of one envelope and what its blocks were found to carry."""

    __slots__ = ("_cache", "_linkable", "_needles", "_omitted", "_plan", "_texts", "_version")

    def __init__(self) -> None:
        #: item id -> its text as given (a reference, not a copy)
        self._texts: dict[str, str] = {}
        #: item ids compared with blocks, in the order they came
        self._linkable: dict[str, None] = {}
        #: item id -> its normalised text, made on first comparison
        self._needles: dict[str, str] = {}
        #: omitted and never selected: not a source, whatever a block holds
        self._omitted: set[str] = set()
        #: bumped whenever the linkable items change: cached block results are then stale
        self._version = 0
        #: block digest -> (version, ids found in it)
        self._cache: dict[str, tuple[int, tuple[str, ...]]] = {}
        #: (version, (id, text, probe) searched inside blocks, short text -> ids equal to a
        #: block, the shortest text searched inside blocks)
        self._plan: tuple[int, list[tuple[str, str, str]], dict[str, list[str]], int] | None = None

    def _remember(self, item_id: str, text: str | None) -> None:
        if (text and (item_id in self._texts or len(self._texts) < MAX_TEXTS)
                and self._texts.get(item_id) is not text):
            self._texts[item_id] = text
            if self._needles.pop(item_id, None) is not None:
                self._version += 1

    def _link(self, item_id: str) -> None:
        if (item_id not in self._linkable and item_id in self._texts
                and len(self._linkable) < MAX_ITEMS):
            self._linkable[item_id] = None
            self._version += 1

    def surfaced(self, item_id: str, text: str | None) -> None:
        """A candidate became available: a source until a selection omits it."""
        self._remember(item_id, text)
        if item_id not in self._omitted:
            self._link(item_id)

    def selected(self, item_id: str, text: str | None) -> None:
        """An item was selected: a source, whatever another selection said."""
        self._omitted.discard(item_id)
        self._remember(item_id, text)
        self._link(item_id)

    def omitted(self, item_id: str, selected: bool) -> None:
        """An item was left out (``selected``: another selection chose it: it stays)."""
        if selected:
            return
        self._omitted.add(item_id)
        if self._linkable.pop(item_id, 0) is None:
            self._version += 1

    def _needle(self, item_id: str) -> str:
        needle = self._needles.get(item_id)
        if needle is None:
            needle = self._needles[item_id] = normalise(self._texts[item_id])
        return needle

    def _partition(self) -> tuple[list[tuple[str, str, str]], dict[str, list[str]], int]:
        """The items to search for inside blocks (id, normalised text, its probe: the longer
        of its first and last words), the short ones a block must equal, and the length of
        the shortest text searched inside blocks."""
        plan = self._plan
        if plan is None or plan[0] != self._version:
            version = self._version
            inside: list[tuple[str, str, str]] = []
            whole: dict[str, list[str]] = {}
            shortest = 0
            # a snapshot: another thread of the envelope may select items meanwhile
            for item_id in tuple(self._linkable):
                needle = self._needle(item_id)
                size = len(needle)
                if size >= MIN_CHARS:
                    # the longer of its first and last words (a space: found from either end)
                    first = needle[:needle.find(" ")] if " " in needle else needle
                    last = needle[needle.rfind(" ") + 1:]
                    inside.append((item_id, needle, first if len(first) >= len(last) else last))
                    if not shortest or size < shortest:
                        shortest = size
                elif needle:
                    whole.setdefault(needle, []).append(item_id)
            plan = self._plan = (version, inside, whole, shortest or MIN_CHARS)
        return plan[1], plan[2], plan[3]

    def sources(self, blocks: Sequence[BlockText]) -> list[tuple[str, ...]] | None:
        """For each block, the ids of the items its text contains (its own item left out);
        None when there is nothing to compare."""
        if not self._linkable:
            return None
        version = self._version
        inside, whole, shortest = self._partition()
        if whole:
            shortest = 1
        cache = self._cache
        out: list[tuple[str, ...]] = [()] * len(blocks)
        todo: list[int] = []
        texts: list[str] = []
        for i, (item_id, digest, text) in enumerate(blocks):
            if not text:
                continue
            if digest is not None:
                hit = cache.get(digest)
                if hit is not None and hit[0] == version:
                    if hit[1]:
                        out[i] = tuple(s for s in hit[1] if s != item_id)
                    continue
            if len(text) < shortest:  # shorter than every item's text: holds none
                continue
            todo.append(i)
            texts.append(text)
        if not todo:
            return out
        found = (_search_normalised(texts, inside, whole) if whole
                 else _search(texts, inside))
        for k, i in enumerate(todo):
            item_id, digest, _ = blocks[i]
            result = tuple(found[k])
            if digest is not None and (digest in cache or len(cache) < _MAX_CACHE):
                cache[digest] = (version, result)
            if result:
                out[i] = tuple(s for s in result if s != item_id)
        return out


def _starts(texts: Sequence[str]) -> list[int]:
    """Where each text starts in ``_SEP.join(texts)``."""
    starts: list[int] = []
    at = 0
    for text in texts:
        starts.append(at)
        at += len(text) + 1
    return starts


def _search_normalised(texts: Sequence[str], inside: Sequence[tuple[str, str, str]],
                       whole: dict[str, list[str]]) -> list[list[str]]:
    """For each block text, the ids of the items it holds, every block normalised (the short
    items must equal a whole block)."""
    texts = [normalise(text) for text in texts]
    haystack = _SEP.join(texts)
    starts = _starts(texts)
    found: list[list[str]] = [list(whole.get(text, ())) for text in texts]
    for item_id, needle, _ in inside:
        pos = haystack.find(needle)
        while pos != -1:
            k = bisect.bisect_right(starts, pos) - 1
            found[k].append(item_id)
            if k + 1 >= len(starts):
                break
            pos = haystack.find(needle, starts[k + 1])
    return found


def _search(texts: Sequence[str], inside: Sequence[tuple[str, str, str]]) -> list[list[str]]:
    """What :func:`_search_normalised` finds without short items, normalising only the blocks
    that hold an item's probe but not its text as it is (see the module's docstring)."""
    haystack = _SEP.join(texts)
    starts = _starts(texts)
    last = len(starts) - 1
    found: list[list[str]] = [[] for _ in texts]
    normalised: dict[int, str] = {}
    for item_id, needle, probe in inside:
        held: set[int] = set()
        pos = haystack.find(needle)
        while pos != -1:
            k = bisect.bisect_right(starts, pos) - 1
            held.add(k)
            if k >= last:
                break
            pos = haystack.find(needle, starts[k + 1])
        if probe != needle:  # else the search above was the probe's too
            size = len(needle)
            pos = haystack.find(probe)
            while pos != -1:
                k = bisect.bisect_right(starts, pos) - 1
                if k not in held and len(texts[k]) >= size:
                    text = normalised.get(k)
                    if text is None:
                        text = normalised[k] = normalise(texts[k])
                    if needle in text:
                        held.add(k)
                if k >= last:
                    break
                pos = haystack.find(probe, starts[k + 1])
        for k in sorted(held):
            found[k].append(item_id)
    return found
