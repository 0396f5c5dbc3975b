"""The Agent Context records (seed 000) and the rebuilt bundle (contract section 5).

Records are ``msgspec`` structs: JSON in and out under the spec's field names, a JSON
Schema generated from the same types, and decoding that validates. Construction validates
too (``__post_init__``): enum fields accept their string values and are normalised to the
enum member, timestamps are normalised to RFC 3339 UTC, and a wrong type or unknown enum
value raises :class:`~otel_agent_context.RecordError` naming the record and the field.

Fields the spec lists but leaves open (``metadata``, ``freshness``, ``trust_level``, ...)
are plain strings or string maps. Fields this project adds to carry what the telemetry
observes (``digest``, ``candidate_count``, ``source_coverage``, a block's
``source_item_refs``, a selection's ``not_injected_item_refs``, ...) are marked in the
docs table (``docs/records.md``).
"""

from __future__ import annotations

import datetime as _dt
import enum
import functools
import re
import types
import typing
from typing import Any, ClassVar

import msgspec

from ._enums import (
    CompactionMethod,
    ContentMode,
    ContextKind,
    EventClass,
    InjectionPoint,
    Lifecycle,
    OmissionReason,
    OverflowStrategy,
    RebuildStatus,
    RedactionState,
    Scope,
    Severity,
    Visibility,
)
from .exceptions import RecordError

__all__ = [
    "AssemblyBlock",
    "Bundle",
    "CompactionSource",
    "ContextAssembly",
    "ContextBudget",
    "ContextCompaction",
    "ContextEnvelope",
    "ContextEvent",
    "ContextInjection",
    "ContextItem",
    "ContextSelection",
    "ContextSourceRef",
    "ContextSummary",
    "ContextSurface",
    "ContextWindow",
    "MissingContext",
    "OmittedRef",
    "RankingSignal",
    "RebuildInfo",
    "RebuildRepair",
    "TelemetryRef",
    "TruncationRecord",
    "WindowSegment",
    "ns_to_rfc3339",
    "rfc3339_to_ns",
]

SCHEMA_VERSION = "0.1"

# ---------------------------------------------------------------------------------------
# timestamps

_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$"
)
_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)


@functools.lru_cache(maxsize=1024)
def _second(seconds: int) -> str:
    # the events of one envelope share a handful of seconds: format each once
    return (_EPOCH + _dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


def ns_to_rfc3339(ns: int) -> str:
    """Nanoseconds since the epoch as RFC 3339 UTC, fraction trimmed of trailing zeros."""
    seconds, frac = divmod(int(ns), 1_000_000_000)
    base = _second(seconds)
    if frac:
        return f"{base}.{frac:09d}".rstrip("0") + "Z"
    return base + "Z"


def rfc3339_to_ns(value: str) -> int:
    """Parse an RFC 3339 timestamp (nanosecond precision kept) to nanoseconds since the epoch."""
    match = _RFC3339.match(value)
    if match is None:
        raise ValueError(f"not an RFC 3339 timestamp: {value!r}")
    date, clock, frac, zone = match.groups()
    parsed = _dt.datetime.fromisoformat(f"{date}T{clock}")
    if zone in ("Z", "z"):
        offset = _dt.timedelta(0)
    else:
        sign = 1 if zone[0] == "+" else -1
        offset = sign * _dt.timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6]))
    parsed = parsed.replace(tzinfo=_dt.timezone(offset))
    delta = parsed - _EPOCH
    whole = (delta.days * 86_400 + delta.seconds) * 1_000_000_000
    return whole + (int(frac.ljust(9, "0")) if frac else 0)


def _normalise_time(value: str) -> str:
    return ns_to_rfc3339(rfc3339_to_ns(value))


# ---------------------------------------------------------------------------------------
# validation


class _Check(typing.NamedTuple):
    name: str
    kind: str  # "enum", "enum_list", "int", "float", "bool", "str", "str_list", "time", ...
    target: Any
    optional: bool


def _plan_for(cls: Any) -> tuple[_Check, ...]:
    hints = typing.get_type_hints(cls)
    checks = []
    for name in cls.__struct_fields__:
        hint = hints[name]
        optional = False
        origin = typing.get_origin(hint)
        if origin in (typing.Union, types.UnionType):
            args = [a for a in typing.get_args(hint) if a is not type(None)]
            optional = len(args) != len(typing.get_args(hint))
            hint = args[0] if len(args) == 1 else hint
            origin = typing.get_origin(hint)
        if name in cls._time_fields:
            checks.append(_Check(name, "time", None, optional))
        elif isinstance(hint, type) and issubclass(hint, enum.Enum):
            checks.append(_Check(name, "enum", hint, optional))
        elif hint is bool:
            checks.append(_Check(name, "bool", None, optional))
        elif hint is int:
            checks.append(_Check(name, "int", None, optional))
        elif hint is float:
            checks.append(_Check(name, "float", None, optional))
        elif hint is str:
            checks.append(_Check(name, "str", None, optional))
        elif origin is list:
            (inner,) = typing.get_args(hint)
            if isinstance(inner, type) and issubclass(inner, enum.Enum):
                checks.append(_Check(name, "enum_list", inner, optional))
            elif inner is str:
                checks.append(_Check(name, "str_list", None, optional))
            elif isinstance(inner, type) and issubclass(inner, msgspec.Struct):
                checks.append(_Check(name, "struct_list", inner, optional))
        elif isinstance(hint, type) and issubclass(hint, msgspec.Struct):
            checks.append(_Check(name, "struct", hint, optional))
        elif origin is dict:
            checks.append(_Check(name, "dict", None, optional))
    return tuple(checks)


def _fail(record: Any, field: str, message: str) -> typing.NoReturn:
    raise RecordError(f"{type(record).__name__}.{field}: {message}")


def _coerce_enum(record: Any, field: str, enum_cls: type[enum.Enum], value: Any) -> Any:
    if isinstance(value, enum_cls):
        return value
    try:
        return enum_cls(value)
    except ValueError:
        allowed = ", ".join(str(m.value) for m in enum_cls)
        _fail(record, field, f"{value!r} is not one of: {allowed}")


def _validate(record: Any) -> None:
    for check in type(record)._checks():
        value = getattr(record, check.name)
        if value is None:
            if not check.optional:
                _fail(record, check.name, "is required")
            continue
        kind = check.kind
        if kind == "str":
            if not isinstance(value, str):
                _fail(record, check.name, f"expected a string, got {type(value).__name__}")
        elif kind == "enum":
            setattr(record, check.name, _coerce_enum(record, check.name, check.target, value))
        elif kind == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                _fail(record, check.name, f"expected an integer, got {value!r}")
        elif kind == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                _fail(record, check.name, f"expected a number, got {value!r}")
            setattr(record, check.name, float(value))
        elif kind == "bool":
            if not isinstance(value, bool):
                _fail(record, check.name, f"expected a boolean, got {value!r}")
        elif kind == "time":
            if not isinstance(value, str):
                _fail(record, check.name, f"expected an RFC 3339 string, got {value!r}")
            try:
                setattr(record, check.name, _normalise_time(value))
            except ValueError as exc:
                _fail(record, check.name, str(exc))
        elif kind == "str_list":
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                _fail(record, check.name, f"expected a list of strings, got {value!r}")
            if not all(isinstance(v, str) for v in value):
                _fail(record, check.name, f"expected a list of strings, got {value!r}")
            if isinstance(value, tuple):
                setattr(record, check.name, list(value))
        elif kind == "enum_list":
            if isinstance(value, str) or not isinstance(value, (list, tuple)):
                _fail(record, check.name, f"expected a list, got {value!r}")
            setattr(
                record,
                check.name,
                [_coerce_enum(record, check.name, check.target, v) for v in value],
            )
        elif kind == "struct_list":
            if not isinstance(value, (list, tuple)):
                _fail(record, check.name, f"expected a list, got {value!r}")
            out = []
            for v in value:
                if isinstance(v, dict):
                    v = check.target(**v)
                elif not isinstance(v, check.target):
                    _fail(record, check.name, f"expected {check.target.__name__}, got {v!r}")
                out.append(v)
            setattr(record, check.name, out)
        elif kind == "struct":
            if isinstance(value, dict):
                setattr(record, check.name, check.target(**value))
            elif not isinstance(value, check.target):
                _fail(record, check.name, f"expected {check.target.__name__}, got {value!r}")
        elif kind == "dict" and not isinstance(value, dict):
            _fail(record, check.name, f"expected an object, got {value!r}")


class _Record(msgspec.Struct, kw_only=True, omit_defaults=True):
    """Base of every record: validated construction, JSON in and out."""

    _time_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def _checks(cls) -> tuple[_Check, ...]:
        return _cached_plan(cls)

    def __post_init__(self) -> None:
        _validate(self)

    def to_dict(self) -> dict[str, Any]:
        """The record as JSON-ready builtins (absent and empty fields left out)."""
        return typing.cast(dict[str, Any], msgspec.to_builtins(self))

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        """Build and validate a record from JSON-shaped builtins."""
        try:
            return msgspec.convert(data, cls)
        except msgspec.ValidationError as exc:
            raise RecordError(f"{cls.__name__}: {exc}") from None

    @classmethod
    def from_json(cls, data: bytes | str) -> Any:
        try:
            return msgspec.json.decode(data, type=cls)
        except msgspec.ValidationError as exc:
            raise RecordError(f"{cls.__name__}: {exc}") from None


@functools.cache
def _cached_plan(cls: type) -> tuple[_Check, ...]:
    return _plan_for(cls)


_TIMES = frozenset({"created_at", "retrieved_at", "modified_at", "updated_at", "completed_at",
                    "requested_at", "resolved_at", "occurred_at"})

# ---------------------------------------------------------------------------------------
# records


class ContextSourceRef(_Record):
    """Origin, selector, digest, authority and native id mapping of an item."""

    _time_fields = _TIMES
    source_id: str | None = None
    uri: str | None = None
    source_kind: str | None = None
    selector: str | None = None  # "<type>:<value>", e.g. "line_range:12-18"
    digest: str | None = None
    authority: str | None = None
    provenance_refs: list[str] = []
    external_mappings: dict[str, str] = {}  # "<system>.<field>" -> native id
    license: str | None = None
    retrieved_at: str | None = None
    modified_at: str | None = None
    metadata: dict[str, str] = {}


class ContextItem(_Record):
    """An inline or referenced unit of context."""

    _time_fields = _TIMES
    item_id: str
    context_kind: ContextKind | None = None
    title: str | None = None
    content_mode: ContentMode | None = None
    content: str | None = None
    content_ref: str | None = None
    mime_type: str | None = None
    language: str | None = None
    source_refs: list[ContextSourceRef] = []
    token_estimate: int | None = None
    byte_size: int | None = None
    freshness: str | None = None
    trust_level: str | None = None
    sensitivity: str | None = None
    redaction_state: RedactionState | None = None
    visibility: list[Visibility] = []
    priority: int | None = None
    digest: str | None = None  # of the content ("hmac-sha256:<hex>" keyed, or "sha256:<hex>")
    created_at: str | None = None
    metadata: dict[str, str] = {}


class ContextSurface(_Record):
    """Candidate context available in a scope before selection."""

    _time_fields = _TIMES
    surface_id: str
    item_refs: list[str] = []
    removed_item_refs: list[str] = []
    item_count: int | None = None
    token_estimate: int | None = None
    created_at: str | None = None
    completed_at: str | None = None
    metadata: dict[str, str] = {}


class OmittedRef(_Record):
    """An item that was a candidate but not selected, and why."""

    item_id: str
    reason: OmissionReason
    detail: str | None = None
    score: float | None = None


class RankingSignal(_Record):
    """Rank, score and scorer signals of a selected item."""

    item_id: str
    rank: int | None = None
    score: float | None = None
    signals: dict[str, float] = {}


class ContextSelection(_Record):
    """Candidate, selected, omitted, ranking and rationale facts."""

    _time_fields = _TIMES
    selection_id: str
    surface_id: str | None = None
    query: str | None = None
    intent: str | None = None
    candidate_item_refs: list[str] = []
    selected_item_refs: list[str] = []
    omitted_item_refs: list[OmittedRef] = []
    ranking_signals: list[RankingSignal] = []
    selection_policy: str | None = None
    budget_ref: str | None = None
    rationale: str | None = None
    actor_ref: str | None = None
    model_ref: str | None = None
    candidate_count: int | None = None
    #: Selected items no assembly block of the envelope names (derived by the rebuild).
    not_injected_item_refs: list[str] = []
    created_at: str | None = None
    completed_at: str | None = None
    metadata: dict[str, str] = {}


class TruncationRecord(_Record):
    """An item or a window segment cut to fit a budget."""

    item_id: str | None = None
    segment: str | None = None
    strategy: OverflowStrategy | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None


class WindowSegment(_Record):
    """A reserved segment of the context window, in window order."""

    segment: str
    order: int | None = None
    reserved_tokens: int | None = None
    used_tokens: int | None = None


class ContextBudget(_Record):
    """Token, byte and item limits for a target plus actual usage."""

    _time_fields = _TIMES
    budget_id: str
    target: Visibility | None = None
    max_tokens: int | None = None
    reserved_tokens: int | None = None
    max_bytes: int | None = None
    max_items: int | None = None
    actual_tokens: int | None = None
    actual_bytes: int | None = None
    actual_items: int | None = None
    overflow_strategy: OverflowStrategy | None = None
    overflow: bool | None = None
    overflow_tokens: int | None = None
    utilization: float | None = None
    window_ref: str | None = None
    truncation_records: list[TruncationRecord] = []
    window_segments: list[WindowSegment] = []
    created_at: str | None = None
    completed_at: str | None = None
    metadata: dict[str, str] = {}


class ContextWindow(_Record):
    """Ordered window layout and reserved segments for a target."""

    _time_fields = _TIMES
    window_id: str
    budget_ref: str | None = None
    target: Visibility | None = None
    max_tokens: int | None = None
    segments: list[WindowSegment] = []
    created_at: str | None = None


class AssemblyBlock(_Record):
    """One block of an assembly, in the order the target sees it."""

    index: int
    item_id: str | None = None
    context_kind: ContextKind | None = None
    tokens: int | None = None
    injection_point: InjectionPoint | None = None
    digest: str | None = None
    #: Items (selected or surfaced in the envelope) whose text the block carries.
    source_item_refs: list[str] = []


class ContextAssembly(_Record):
    """Ordered context blocks prepared for a target."""

    _time_fields = _TIMES
    assembly_id: str
    target: Visibility | None = None
    ordered_blocks: list[AssemblyBlock] = []
    wrapping_policy: str | None = None
    separator_policy: str | None = None
    visibility: list[Visibility] = []
    budget_ref: str | None = None
    source_item_refs: list[str] = []
    redaction_state: RedactionState | None = None
    block_count: int | None = None
    token_count: int | None = None
    hash: str | None = None
    created_at: str | None = None
    metadata: dict[str, str] = {}


class ContextInjection(_Record):
    """Where assembled context became visible."""

    _time_fields = _TIMES
    injection_id: str
    assembly_id: str | None = None
    target: Visibility | None = None
    injection_point: InjectionPoint | None = None
    native_id: str | None = None
    visibility: list[Visibility] = []
    final_ref: str | None = None
    hash: str | None = None
    created_at: str | None = None
    metadata: dict[str, str] = {}


class CompactionSource(_Record):
    """A source of a compaction and whether the summary accounts for it."""

    item_id: str
    token_estimate: int | None = None
    covered: bool | None = None


class ContextCompaction(_Record):
    """Replacement of larger context with a shorter summary or digest."""

    _time_fields = _TIMES
    compaction_id: str
    scope: str | None = None
    source_item_refs: list[str] = []
    source_coverage: list[CompactionSource] = []
    summary_ref: str | None = None
    method: CompactionMethod | None = None
    trigger: str | None = None
    coverage: float | None = None
    loss_notes: list[str] = []
    validation: str | None = None
    replacement_policy: str | None = None
    source_count: int | None = None
    tokens_before: int | None = None
    tokens_after: int | None = None
    created_at: str | None = None
    completed_at: str | None = None
    metadata: dict[str, str] = {}


class ContextSummary(_Record):
    """Summary content, coverage, loss notes, validation and refresh policy."""

    _time_fields = _TIMES
    summary_id: str
    compaction_ref: str | None = None
    content: str | None = None
    token_estimate: int | None = None
    digest: str | None = None
    refresh_policy: str | None = None
    coverage: float | None = None
    loss_notes: list[str] = []
    validation: str | None = None
    source_item_refs: list[str] = []
    created_at: str | None = None
    metadata: dict[str, str] = {}


class MissingContext(_Record):
    """A known gap: what is missing, what it blocks, where it was asked for."""

    _time_fields = _TIMES
    missing_id: str
    scope: str | None = None
    question: str | None = None
    needed_for: str | None = None
    severity: Severity | None = None
    candidate_sources: list[str] = []
    blocked_actions: list[str] = []
    requested_from: str | None = None
    status: str | None = None  # open, requested, resolved, ... (see MissingStatus)
    resolution_refs: list[str] = []
    created_at: str | None = None
    requested_at: str | None = None
    resolved_at: str | None = None
    metadata: dict[str, str] = {}


class ContextEvent(_Record):
    """A lifecycle event (one of the spec's event classes) with its time and span."""

    _time_fields = _TIMES
    event_class: EventClass
    occurred_at: str
    context_id: str | None = None
    subject_ref: str | None = None  # "<kind>:<id>", e.g. "selection:sel_1"
    trace_id: str | None = None
    span_id: str | None = None
    metadata: dict[str, str] = {}  # details of the event, e.g. a redaction's method


class TelemetryRef(_Record):
    """A span the envelope was rebuilt from."""

    trace_id: str
    span_id: str
    span_name: str | None = None


class ContextEnvelope(_Record):
    """Portable snapshot of the context of a turn, task, session, tool call, review or
    handoff."""

    _time_fields = _TIMES
    context_id: str
    scope: Scope
    schema_version: str = SCHEMA_VERSION
    lifecycle: Lifecycle | None = None
    created_at: str | None = None
    completed_at: str | None = None
    producer: str | None = None
    parent_id: str | None = None
    actor_refs: list[str] = []
    runtime_refs: list[str] = []
    surface_refs: list[str] = []
    item_refs: list[str] = []
    selection_refs: list[str] = []
    budget_ref: str | None = None
    assembly_refs: list[str] = []
    injection_refs: list[str] = []
    compaction_refs: list[str] = []
    missing_context_refs: list[str] = []
    policy_refs: list[str] = []
    evidence_refs: list[str] = []
    telemetry_refs: list[TelemetryRef] = []
    metadata: dict[str, str] = {}  # reused GenAI attributes: gen_ai.agent.name, user.id, ...


class RebuildRepair(_Record):
    """One change the boundary made to what an emitter sent (``rebuild.repairs``)."""

    kind: str
    field: str
    received: str
    action: str
    span_id: str | None = None
    event: str | None = None


class RebuildInfo(_Record):
    """How complete the rebuild is (contract section 5)."""

    status: RebuildStatus
    expected_spans: int | None = None
    received_spans: int = 0
    dropped_events: int = 0
    dropped_attributes: int = 0
    partial_reasons: list[str] = []
    notes: list[str] = []
    repairs: list[RebuildRepair] = []


class Bundle(_Record):
    """One rebuilt envelope with every record it holds (contract section 5)."""

    context_envelope: ContextEnvelope
    context_surfaces: list[ContextSurface] = []
    context_items: list[ContextItem] = []
    context_selections: list[ContextSelection] = []
    context_budgets: list[ContextBudget] = []
    context_windows: list[ContextWindow] = []
    context_assemblies: list[ContextAssembly] = []
    context_injections: list[ContextInjection] = []
    context_compactions: list[ContextCompaction] = []
    context_summaries: list[ContextSummary] = []
    missing_context: list[MissingContext] = []
    context_events: list[ContextEvent] = []
    rebuild: RebuildInfo | None = None


def bundle_json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of the rebuilt bundle and every record in it."""
    schema = msgspec.json.schema(Bundle)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://otel-agent-context.dev/schema/{SCHEMA_VERSION}/bundle.json"
    schema["title"] = "Agent Context bundle"
    return schema


def records_json_schema() -> dict[str, Any]:
    """JSON Schema with one definition per record of the specification."""
    _, defs = msgspec.json.schema_components(
        [ContextEnvelope, ContextSurface, ContextItem, ContextSourceRef, ContextSelection,
         ContextBudget, ContextWindow, ContextAssembly, ContextInjection, ContextCompaction,
         ContextSummary, MissingContext, ContextEvent, Bundle]
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://otel-agent-context.dev/schema/{SCHEMA_VERSION}/records.json",
        "title": "Agent Context records",
        "$defs": defs,
    }
