"""Context Runtime ABI: one reading of a session folder as a bundle of Agent Context records.

One pack build (``context/pack.json``) is one ``turn`` envelope:

- the pack's items are the assembly's ordered blocks and the selected items of a selection;
  ``context/budget`` (else the pack's ``budget_tokens``) is the budget, overflowing when the
  pack's tokens exceed it;
- ``context/swap/index.jsonl`` entries are candidates omitted for ``budget`` (out of the
  window, not deleted), ``context/dedup/index.jsonl`` refs after the first are omitted for
  ``duplicate_coverage``;
- ``summary.md``, ``facts.jsonl``, ``decisions.jsonl``, ``todo.md`` (and ``refs.jsonl`` when
  its entries carry a ``source``) are one compaction and one summary each; the compaction's
  sources are the history it replaced, ``messages.jsonl`` outside the pack's message window,
  cut into ranges that the file cites (covered) or does not (not covered);
- child results and ``refs.jsonl`` entries are items on the surface.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import _semconv as S
from .._digest import digest_bytes
from .._enums import (
    CompactionMethod,
    ContentMode,
    ContextKind,
    InjectionPoint,
    Lifecycle,
    OmissionReason,
    Scope,
    Visibility,
)
from .._records import (
    AssemblyBlock,
    Bundle,
    CompactionSource,
    ContextAssembly,
    ContextBudget,
    ContextCompaction,
    ContextEnvelope,
    ContextItem,
    ContextSelection,
    ContextSourceRef,
    ContextSummary,
    ContextSurface,
    OmittedRef,
    ns_to_rfc3339,
)
from ..instrumentation._tokens import estimate_tokens
from ._abi_reader import (
    BUDGET,
    CHILD_DIR,
    DEDUP_INDEX,
    MESSAGES,
    PACK,
    SWAP_INDEX,
    Range,
    _count,
    _digest,
    _History,
    _Reader,
    _str,
)
from ._abi_rules import RuleBreach, missing_child_result, summary_only_copy

#: The system name of native ids: ``context.source.native.context_runtime_abi.<field>``.
NATIVE = "context_runtime_abi"

# ---------------------------------------------------------------------------------------
# line ranges (1-based, inclusive)

_MESSAGE_REF = re.compile(r"\bmessages(?:\.jsonl)?:(\d+)(?:-(\d+))?\b")


def _merge(ranges: Iterable[Range]) -> list[Range]:
    out: list[Range] = []
    for a, b in sorted(ranges):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def _intersect(ranges: list[Range], other: list[Range]) -> list[Range]:
    out = []
    for a, b in ranges:
        for c, d in other:
            lo, hi = max(a, c), min(b, d)
            if lo <= hi:
                out.append((lo, hi))
    return _merge(out)


def _subtract(ranges: list[Range], minus: list[Range]) -> list[Range]:
    out = []
    for a, b in ranges:
        start = a
        for c, d in minus:
            if d < start or c > b:
                continue
            if c > start:
                out.append((start, c - 1))
            start = max(start, d + 1)
        if start <= b:
            out.append((start, b))
    return out


def _fmt(r: Range) -> str:
    return f"{r[0]}-{r[1]}"


def _message_refs(reader: _Reader, rel: str, where: str, text: str) -> list[Range]:
    """Every ``messages:A-B`` / ``messages:N`` in ``text``."""
    out = []
    for match in _MESSAGE_REF.finditer(text):
        a = int(match.group(1))
        b = int(match.group(2)) if match.group(2) else a
        if a < 1 or b < a:
            reader.warn(rel, f"{where}: bad message range {match.group(0)!r}; ignored")
            continue
        out.append((a, b))
    return out


# ---------------------------------------------------------------------------------------
# mapping tables

#: pack item kind -> context_kind
PACK_KINDS: Mapping[str, ContextKind] = {
    "system": ContextKind.SYSTEM_PROMPT,
    "developer": ContextKind.DEVELOPER_INSTRUCTION,
    "user": ContextKind.USER_MESSAGE,
    "summary": ContextKind.THREAD_SUMMARY,
    "facts": ContextKind.DURABLE_MEMORY,
    "decisions": ContextKind.DURABLE_MEMORY,
    "todo": ContextKind.WORKING_MEMORY,
    "refs": ContextKind.ARTIFACT_REF,
    "recent_messages": ContextKind.SESSION_HISTORY,
    "messages": ContextKind.SESSION_HISTORY,
    "swap": ContextKind.SESSION_HISTORY,
    "child_result": ContextKind.PEER_AGENT_MESSAGE,
    "tool_output": ContextKind.TOOL_RESULT,
    "file": ContextKind.FILE_EXCERPT,
    "pinned": ContextKind.MANUAL_NOTE,
}
#: pack item kind -> injection point, where the ABI leaves no doubt
PACK_INJECTION: Mapping[str, InjectionPoint] = {
    "system": InjectionPoint.SYSTEM_PROMPT,
    "developer": InjectionPoint.DEVELOPER_PROMPT,
    "recent_messages": InjectionPoint.MESSAGE_HISTORY,
    "messages": InjectionPoint.MESSAGE_HISTORY,
}
#: swap index kind -> context_kind
SWAP_KINDS: Mapping[str, ContextKind] = {
    "message_range": ContextKind.SESSION_HISTORY,
    "tool_output": ContextKind.TOOL_RESULT,
    "file": ContextKind.FILE_EXCERPT,
}
#: refs.jsonl kind -> context_kind
REF_KINDS: Mapping[str, ContextKind] = {
    "file": ContextKind.FILE_EXCERPT,
    "artifact": ContextKind.ARTIFACT_REF,
    "tool_output": ContextKind.TOOL_RESULT,
    "swap": ContextKind.SESSION_HISTORY,
}
#: derived file -> (compaction id, method)
DERIVED: Mapping[str, tuple[str, CompactionMethod]] = {
    "context/summary.md": ("abi-compaction-summary", CompactionMethod.ABSTRACTIVE_SUMMARY),
    "context/facts.jsonl": ("abi-compaction-facts", CompactionMethod.STRUCTURED_DIGEST),
    "context/decisions.jsonl": ("abi-compaction-decisions", CompactionMethod.STRUCTURED_DIGEST),
    "context/todo.md": ("abi-compaction-todo", CompactionMethod.STRUCTURED_DIGEST),
    "context/refs.jsonl": ("abi-compaction-refs", CompactionMethod.STRUCTURED_DIGEST),
}
SURFACE_ID = "abi-surface"
SELECTION_ID = "abi-selection"
BUDGET_ID = "abi-budget"
ASSEMBLY_ID = "abi-assembly"


def ref_item_id(ref: str) -> str:
    """The item id of a ref as the ABI writes it: ``messages:1-40`` is
    ``messages.jsonl#1-40``, ``swap:X`` is ``context/swap/chunk/X``, ``dedup:H`` is
    ``context/dedup/blob/H``; anything else is its own id."""
    kind, sep, rest = ref.partition(":")
    if sep and rest:
        if kind == "messages":
            return f"{MESSAGES}#{rest}"
        if kind == "swap":
            return f"context/swap/chunk/{rest}"
        if kind == "dedup":
            return f"context/dedup/blob/{rest}"
    return ref


def _native(**fields: Any) -> dict[str, str]:
    return {f"{NATIVE}.{k}": str(v) for k, v in fields.items() if v is not None}


# ---------------------------------------------------------------------------------------
# the snapshot


class _Build:
    """Everything one reading of the folder turns into."""

    def __init__(self, reader: _Reader, history: _History) -> None:
        self.reader = reader
        self.history = history
        self.items: dict[str, ContextItem] = {}  # surface items, in surface order
        self.breaches: list[RuleBreach] = []
        self.refers: set[str] = set()  # session files the context points at

    def add(self, item: ContextItem) -> None:
        self.items.setdefault(item.item_id, item)

    def breach(self, breach: RuleBreach | None) -> None:
        if breach is not None:
            self.breaches.append(breach)

    def file_facts(self, rel: str, selector: str | None, where: str = ""
                   ) -> tuple[str | None, int | None, str | None, str | None, int | None]:
        """(digest, byte size, modified_at, resolved selector, estimated tokens) of the content
        a session file (and a range of its lines) holds; Nones for what cannot be read."""
        nothing = (None, None, None, None, None)
        if rel == MESSAGES and self.history.present:
            st = self.reader.stat(MESSAGES)
            mod = ns_to_rfc3339(st.st_mtime_ns) if st is not None else None
            r = self.history.resolve(selector)
            if r is None:
                if selector is not None and self.history.count:
                    self.reader.warn(PACK, f"{where}: range {selector!r} is not a range of "
                                           f"{MESSAGES}; no digest")
                return None, None, mod, None, None
            facts = self.history.digest_in(r)
            if facts is None:
                return None, None, mod, None, None
            return (facts[0], facts[1], mod, f"line_range:{_fmt(r)}",
                    self.history.tokens_in(r))
        if rel.startswith("/") or ".." in Path(rel).parts:
            return nothing  # outside the session folder: not ours to read
        st = self.reader.stat(rel)
        if st is None or not (self.reader.root / rel).is_file():
            return nothing
        raw = self.reader.read(rel)
        if raw is None:
            return nothing
        sel = None
        m = re.fullmatch(r"(\d+)-(\d+)", selector.strip()) if selector is not None else None
        if m is not None:
            sel = f"line_range:{m.group(1)}-{m.group(2)}"
            raw = b"".join(raw.splitlines(keepends=True)[int(m.group(1)) - 1:int(m.group(2))])
        return (_digest(raw), len(raw), ns_to_rfc3339(st.st_mtime_ns), sel,
                estimate_tokens(self.reader.text(rel, raw)))


def _pack_items(build: _Build, pack: dict[str, Any]) -> list[tuple[ContextItem, str | None]]:
    reader = build.reader
    raw_items = pack.get("items")
    if raw_items is None:
        reader.warn(PACK, "no items")
        return []
    if not isinstance(raw_items, list):
        reader.warn(PACK, f"items: expected a list, got {type(raw_items).__name__}")
        return []
    out = []
    seen: set[str] = set()
    for index, raw in enumerate(raw_items):
        where = f"items[{index}]"
        if not isinstance(raw, dict):
            reader.warn(PACK, f"{where}: expected an object; ignored")
            continue
        kind = _str(raw.get("kind"))
        source = _str(raw.get("source"))
        rng = _str(raw.get("range"))
        if source is None:
            reader.warn(PACK, f"{where}: no source (pack items SHOULD identify their source)")
        else:
            build.refers.add(source)
        item_id = f"pack:{index}" if source is None else source + (f"#{rng}" if rng else "")
        if item_id in seen:
            item_id = f"{item_id}@{index}"
        seen.add(item_id)
        tokens = _count(reader, PACK, f"{where}.tokens", raw.get("tokens"))
        digest = size = modified = selector = None
        if source is not None:
            digest, size, modified, selector, estimate = build.file_facts(source, rng, where)
            if tokens is None and estimate is not None:
                reader.warn(PACK, f"{where}: no tokens; estimated from {source}")
                tokens = estimate
        src = ContextSourceRef(uri=source, source_kind="file" if source else None,
                               selector=selector, modified_at=modified,
                               external_mappings=_native(kind=kind, range=rng))
        item = ContextItem(
            item_id=item_id, context_kind=PACK_KINDS.get(kind or "", ContextKind.CUSTOM),
            content_mode=ContentMode.REF, content_ref=source, token_estimate=tokens, byte_size=size,
            digest=digest, source_refs=[src])
        build.add(item)
        out.append((item, kind))
        if source is not None and digest is None:
            build.breach(missing_child_result(reader.root, source, f"{PACK} ({where})"))
    return out


def _token_number(values: Mapping[str, Any], *keys: str) -> int | None:
    for key in keys:
        v = values.get(key)
        if isinstance(v, str) and v.isdigit():
            return int(v)
        if isinstance(v, int) and not isinstance(v, bool) and v >= 0:
            return v
    return None


def _budget(reader: _Reader, pack: dict[str, Any]) -> tuple[int | None, int | None]:
    """(max tokens, reserved tokens) from context/budget, else the pack's budget_tokens.

    ``context/budget`` is a token count (``32000``), ``key=value`` lines (``tokens=32000``,
    ``reserved_tokens=2000``) or a JSON object with those keys.
    """
    data = reader.read(BUDGET)
    if data is not None:
        text = reader.text(BUDGET, data).strip()
        if re.fullmatch(r"\d+", text):
            return int(text), None
        values: Mapping[str, Any] = {}
        if text.startswith("{"):
            values = reader.json_object(BUDGET, data) or {}
        else:
            values = {k.strip(): v.strip() for k, sep, v in
                      (line.replace(":", "=", 1).partition("=") for line in text.splitlines())
                      if sep}
        max_tokens = _token_number(values, "tokens", "max_tokens", "budget_tokens",
                                   "total_tokens")
        if max_tokens is not None:
            return max_tokens, _token_number(values, "reserved_tokens", "reserved", "reserve")
        reader.warn(BUDGET, f"not a token budget: {text[:80]!r}; ignored")
    return _count(reader, PACK, "budget_tokens", pack.get("budget_tokens")), None


def _swap(build: _Build, selected: set[str]) -> list[tuple[ContextItem, OmittedRef]]:
    reader = build.reader
    data = reader.read(SWAP_INDEX)
    if data is None:
        return []
    out = []
    for number, entry in reader.jsonl(SWAP_INDEX, data):
        swap_id = _str(entry.get("id"))
        if swap_id is None:
            reader.warn(SWAP_INDEX, f"line {number}: no id; ignored")
            continue
        chunk = f"context/swap/chunk/{swap_id}"
        source = _str(entry.get("source"))
        rng = _str(entry.get("range"))
        event = _str(entry.get("event"))
        selector = f"line_range:{rng}" if rng and re.fullmatch(r"\d+-\d+", rng) else None
        if selector is None and event is not None:
            selector = f"event:{event}"
        digest = None
        chunk_data = reader.read(chunk)
        if chunk_data is not None:
            digest = _digest(chunk_data)
            # a reference chunk: {"source", "start_event", "end_event", "hash"}
            ref = reader.json_object(chunk, chunk_data) if chunk_data[:1] == b"{" else None
            if ref is not None and selector is None and _str(ref.get("start_event")):
                selector = f"event_range:{ref['start_event']}..{ref.get('end_event', '')}"
        if source is not None:
            build.refers.add(source)
        kind = _str(entry.get("kind"))
        item = ContextItem(
            item_id=chunk, context_kind=SWAP_KINDS.get(kind or "", ContextKind.CUSTOM),
            content_mode=ContentMode.REF, content_ref=chunk, title=_str(entry.get("summary")),
            token_estimate=_count(reader, SWAP_INDEX, f"line {number}: tokens",
                                  entry.get("tokens")),
            digest=digest,
            source_refs=[ContextSourceRef(uri=source, source_kind="file" if source else None,
                                          selector=selector,
                                          external_mappings=_native(swap_id=swap_id, kind=kind,
                                                                    range=rng, event=event))])
        build.add(item)
        if chunk in selected:
            continue  # swapped back in: the pack selected it
        detail = f"swapped out to {chunk} (out of the window, not deleted)"
        out.append((build.items[chunk], OmittedRef(item_id=chunk, reason=OmissionReason.BUDGET,
                                                   detail=detail)))
    return out


_REF_PREFIX_KINDS = {"messages": ContextKind.SESSION_HISTORY, "swap": ContextKind.SESSION_HISTORY,
                     "tool": ContextKind.TOOL_RESULT, "file": ContextKind.FILE_EXCERPT}


def _dedup(build: _Build, selected: set[str], omitted: set[str]
           ) -> list[tuple[ContextItem, OmittedRef]]:
    reader = build.reader
    data = reader.read(DEDUP_INDEX)
    if data is None:
        return []
    out = []
    for number, entry in reader.jsonl(DEDUP_INDEX, data):
        blob = _str(entry.get("hash"))
        refs = entry.get("refs")
        if blob is None or not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
            reader.warn(DEDUP_INDEX, f"line {number}: expected hash and a list of refs; ignored")
            continue
        tokens = _count(reader, DEDUP_INDEX, f"line {number}: tokens", entry.get("tokens"))
        size = _count(reader, DEDUP_INDEX, f"line {number}: bytes", entry.get("bytes"))
        algo, sep, hexpart = blob.partition("-")
        digest = f"{algo}:{hexpart}" if sep else blob
        ids = [ref_item_id(r) for r in refs]
        canonical = next((i for i in ids if i in selected), ids[0] if ids else None)
        for ref, item_id in zip(refs, ids, strict=True):
            prefix = ref.partition(":")[0]
            selector = None
            if prefix == "messages":
                selector = f"line_range:{ref.partition(':')[2]}"
                build.refers.add(MESSAGES)
            build.add(ContextItem(
                item_id=item_id, context_kind=_REF_PREFIX_KINDS.get(prefix, ContextKind.CUSTOM),
                content_mode=ContentMode.REF, token_estimate=tokens, byte_size=size, digest=digest,
                source_refs=[ContextSourceRef(
                    uri=MESSAGES if prefix == "messages" else None, selector=selector,
                    source_id=ref, external_mappings=_native(dedup_hash=blob))]))
            if item_id == canonical or item_id in selected or item_id in omitted:
                continue
            omitted.add(item_id)
            out.append((build.items[item_id], OmittedRef(
                item_id=item_id, reason=OmissionReason.DUPLICATE_COVERAGE,
                detail=f"same content as {canonical} ({blob})")))
    return out


def _children(build: _Build) -> None:
    root = build.reader.root / CHILD_DIR
    try:
        children = sorted(p for p in root.iterdir() if p.is_dir())
    except OSError:
        return
    for child in children:
        try:
            files = sorted(p for p in child.iterdir() if p.is_file())
        except OSError as exc:
            build.reader.warn(f"{CHILD_DIR}/{child.name}", f"cannot list ({exc.strerror})")
            continue
        for f in files:
            rel = f"{CHILD_DIR}/{child.name}/{f.name}"
            if rel in build.items:
                continue
            digest, size, modified, _, _ = build.file_facts(rel, None)
            is_result = f.name.startswith("result")
            build.add(ContextItem(
                item_id=rel,
                context_kind=ContextKind.PEER_AGENT_MESSAGE if is_result
                else ContextKind.ARTIFACT_REF,
                content_mode=ContentMode.REF, content_ref=rel, byte_size=size, digest=digest,
                source_refs=[ContextSourceRef(uri=rel, source_kind="file", modified_at=modified,
                                              external_mappings=_native(child=child.name))]))


def _refs(build: _Build, entries: list[tuple[int, dict[str, Any]]]) -> None:
    reader = build.reader
    for number, entry in entries:
        path = _str(entry.get("path"))
        ref_id = _str(entry.get("id"))
        if path is None and ref_id is None:
            reader.warn("context/refs.jsonl", f"line {number}: no id and no path; ignored")
            continue
        item_id = path or f"ref:{ref_id}"
        if path is not None:
            build.breach(missing_child_result(reader.root, path,
                                              f"context/refs.jsonl (line {number})"))
        if item_id in build.items:
            continue
        kind = _str(entry.get("kind"))
        digest, size, modified, _, _ = build.file_facts(path, None) if path else (None,) * 5
        build.add(ContextItem(
            item_id=item_id,
            context_kind=REF_KINDS.get(kind or "", ContextKind.EXTERNAL_RESOURCE),
            content_mode=ContentMode.REF, content_ref=path, title=_str(entry.get("summary")),
            digest=digest, byte_size=size,
            source_refs=[ContextSourceRef(uri=path, source_kind=kind, modified_at=modified,
                                          external_mappings=_native(ref_id=ref_id))]))


def _citations(reader: _Reader, rel: str, data: bytes
               ) -> tuple[list[Range], list[tuple[int, dict[str, Any]]], bool]:
    """(message ranges cited, jsonl entries, whether any entry names a source)."""
    if rel.endswith(".md"):
        text = reader.text(rel, data)
        return _message_refs(reader, rel, rel, text), [], True
    entries = reader.jsonl(rel, data)
    cited: list[Range] = []
    has_source = False
    for number, entry in entries:
        src = entry.get("source")
        values = src if isinstance(src, list) else [src] if src is not None else []
        for value in values:
            if not isinstance(value, str):
                reader.warn(rel, f"line {number}: source must be a string; ignored")
                continue
            has_source = True
            if value.startswith("messages"):
                found = _message_refs(reader, rel, f"line {number}", value)
                if not found:
                    reader.warn(rel, f"line {number}: unreadable source {value!r}; ignored")
                cited.extend(found)
    return cited, entries, has_source


def _compactions(build: _Build, window: list[Range], at: str, pack_tokens: Mapping[str, int]
                 ) -> tuple[list[ContextCompaction], list[ContextSummary], list[ContextItem],
                            list[tuple[int, dict[str, Any]]]]:
    reader, history = build.reader, build.history
    compactions, summaries, segment_items = [], [], []
    refs_entries: list[tuple[int, dict[str, Any]]] = []
    everything = [(1, history.count)] if history.count else []
    compacted = _subtract(everything, window)  # the history outside the pack's window
    for rel, (compaction_id, method) in DERIVED.items():
        data = reader.read(rel)
        if data is None:
            continue
        cited, entries, has_source = _citations(reader, rel, data)
        if rel == "context/refs.jsonl":
            refs_entries = entries
            if not has_source:
                continue  # references, not a compression of history
        cited = _merge(cited)
        if cited:
            build.refers.add(MESSAGES)
        missing = _subtract(cited, everything)
        loss_notes = []
        if missing:
            ranges = ", ".join(f"messages:{_fmt(r)}" for r in missing)
            have = f"{history.count} messages" if history.present else "no messages.jsonl"
            loss_notes.append(f"cites {ranges}, not in {MESSAGES} ({have})")
            build.breach(summary_only_copy(rel, ranges, have))
        if not cited:
            loss_notes.append(f"cites no ranges of {MESSAGES}: coverage unknown")
        covered = _intersect(compacted, cited)
        sources = sorted([(r, True) for r in covered] +
                         [(r, False) for r in _subtract(compacted, covered)])
        refs, coverage = [], []
        total = covered_tokens = 0
        for r, is_covered in sources if cited else []:
            item_id = f"{MESSAGES}#{_fmt(r)}"
            tokens = history.tokens_in(r)
            total += tokens
            covered_tokens += tokens if is_covered else 0
            refs.append(item_id)
            coverage.append(CompactionSource(item_id=item_id, token_estimate=tokens,
                                             covered=is_covered))
            segment_items.append(ContextItem(item_id=item_id,
                                             context_kind=ContextKind.SESSION_HISTORY,
                                             token_estimate=tokens))
        text = reader.text(rel, data)
        after = pack_tokens.get(rel, estimate_tokens(text))
        compactions.append(ContextCompaction(
            compaction_id=compaction_id, scope="session_history", method=method,
            source_item_refs=refs, source_coverage=coverage, summary_ref=rel,
            coverage=covered_tokens / total if total else None, loss_notes=loss_notes,
            replacement_policy="keep_history", source_count=len(refs),
            tokens_before=total if refs else None, tokens_after=after,
            created_at=at, completed_at=at))
        summaries.append(ContextSummary(
            summary_id=rel, compaction_ref=compaction_id, content=text, token_estimate=after,
            digest=_digest(data), refresh_policy="rebuild_from_history", created_at=at))
    return compactions, summaries, segment_items, refs_entries


def _names(root: Path, pack: Mapping[str, Any] | None) -> tuple[str | None, str]:
    """(agent, session): from the pack, else from ``.../agent/<agent>/session/<session>``."""
    agent = _str(pack.get("agent")) if pack else None
    session = _str(pack.get("session")) if pack else None
    parts = root.resolve().parts
    if len(parts) >= 4 and parts[-2] == "session" and parts[-4] == "agent":
        agent = agent or parts[-3]
    return agent, session or root.name


def _envelope_refs(agent: str | None, session: str
                   ) -> tuple[list[str], list[str], dict[str, str]]:
    actors = [f"agent:{agent}"] if agent else []
    meta = {S.GEN_AI_CONVERSATION_ID: session}
    if agent:
        meta[S.GEN_AI_AGENT_NAME] = agent
    return actors, [f"session:{session}"], meta


def _bundle(build: _Build, pack: dict[str, Any], pack_key: tuple[int, str], agent: str | None,
            session: str) -> Bundle:
    reader = build.reader
    mtime_ns, sha = pack_key
    at = ns_to_rfc3339(mtime_ns)
    pack_items = _pack_items(build, pack)
    selected_ids = [item.item_id for item, _ in pack_items]
    selected = set(selected_ids)
    omitted_pairs = _swap(build, selected)
    omitted_ids = {o.item_id for _, o in omitted_pairs}
    omitted_pairs += _dedup(build, selected, omitted_ids)
    _children(build)

    # the pack's window of messages.jsonl
    window: list[Range] = []
    for item, _ in pack_items:
        src = item.source_refs[0]
        if src.uri == MESSAGES and src.selector and src.selector.startswith("line_range:"):
            a, _, b = src.selector[len("line_range:"):].partition("-")
            window.append((int(a), int(b)))
    window = _merge(window)
    pack_tokens = {item.content_ref: item.token_estimate for item, _ in pack_items
                   if item.content_ref and item.token_estimate is not None
                   and "#" not in item.item_id}
    compactions, summaries, segment_items, refs_entries = _compactions(
        build, window, at, pack_tokens)
    _refs(build, refs_entries)

    # budget and assembly
    max_tokens, reserved = _budget(reader, pack)
    actual = sum(item.token_estimate or 0 for item, _ in pack_items)
    overflow = overflow_tokens = utilization = None
    if max_tokens:
        over = actual + (reserved or 0) - max_tokens
        overflow = over > 0
        overflow_tokens = over if over > 0 else None
        utilization = actual / max_tokens
    budget = ContextBudget(
        budget_id=BUDGET_ID, target=Visibility.MODEL, max_tokens=max_tokens,
        reserved_tokens=reserved,
        actual_tokens=actual, actual_items=len(pack_items), overflow=overflow,
        overflow_tokens=overflow_tokens, utilization=utilization, created_at=at,
        completed_at=at)
    blocks = [AssemblyBlock(index=i, item_id=item.item_id, context_kind=item.context_kind,
                            tokens=item.token_estimate,
                            injection_point=PACK_INJECTION.get(kind or ""), digest=item.digest)
              for i, (item, kind) in enumerate(pack_items)]
    assembly = ContextAssembly(
        assembly_id=ASSEMBLY_ID, target=Visibility.MODEL, ordered_blocks=blocks,
        budget_ref=BUDGET_ID,
        block_count=len(blocks), token_count=actual, hash=digest_bytes(bytes.fromhex(sha)),
        created_at=at)

    surface_items = list(build.items.values())
    surface = ContextSurface(
        surface_id=SURFACE_ID, item_refs=[i.item_id for i in surface_items],
        item_count=len(surface_items),
        token_estimate=sum(i.token_estimate or 0 for i in surface_items),
        created_at=at, completed_at=at)
    omitted = [o for _, o in omitted_pairs]
    candidates = selected_ids + [o.item_id for o in omitted]
    selection = ContextSelection(
        selection_id=SELECTION_ID, surface_id=SURFACE_ID, candidate_item_refs=candidates,
        selected_item_refs=selected_ids, omitted_item_refs=omitted, budget_ref=BUDGET_ID,
        selection_policy=PACK, candidate_count=len(candidates), created_at=at,
        completed_at=at)

    actors, runtime, meta = _envelope_refs(agent, session)
    envelope = ContextEnvelope(
        context_id=f"abi:{agent or '-'}/{session}/pack-{mtime_ns}-{sha[:8]}", scope=Scope.TURN,
        lifecycle=Lifecycle.ASSEMBLED, created_at=at, completed_at=at, actor_refs=actors,
        runtime_refs=runtime, metadata=meta)
    items = {i.item_id: i for i in surface_items}
    for seg in segment_items:
        items.setdefault(seg.item_id, seg)
    return Bundle(context_envelope=envelope, context_surfaces=[surface],
                  context_items=list(items.values()), context_selections=[selection],
                  context_budgets=[budget], context_assemblies=[assembly],
                  context_compactions=compactions, context_summaries=summaries)


