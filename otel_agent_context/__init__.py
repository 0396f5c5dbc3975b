"""otel-agent-context: the Agent Context lifecycle as OpenTelemetry telemetry.

Record what an agent put into its context window and what it left out::

    from otel_agent_context import AgentContext

    ctx = AgentContext()
    with ctx.envelope(scope="turn", agent_name="support") as env:
        with env.selection(intent="answer") as sel:
            sel.selected(doc, rank=1, score=0.92)
            sel.omitted(old_doc, reason="stale_source")
"""

from ._api import (
    AgentContext,
    Assembly,
    Budget,
    Compaction,
    Envelope,
    Selection,
    Surface,
    current_envelope,
)
from ._enums import (
    CompactionMethod,
    ContentMode,
    ContextKind,
    EventClass,
    InjectionPoint,
    Lifecycle,
    MissingStatus,
    OmissionReason,
    OverflowStrategy,
    RedactionState,
    Scope,
    Severity,
    Visibility,
)
from ._masking import builtin_masker, set_content_masker
from ._records import (
    AssemblyBlock,
    Bundle,
    CompactionSource,
    ContextAssembly,
    ContextBudget,
    ContextCompaction,
    ContextEnvelope,
    ContextEvent,
    ContextInjection,
    ContextItem,
    ContextSelection,
    ContextSourceRef,
    ContextSummary,
    ContextSurface,
    ContextWindow,
    MissingContext,
    OmittedRef,
    RankingSignal,
    RebuildInfo,
    TelemetryRef,
    TruncationRecord,
    WindowSegment,
    bundle_json_schema,
    records_json_schema,
)
from ._replay import emit_bundle
from ._version import __version__
from .exceptions import AgentContextError, ConfigError, RecordError

__all__ = [
    "AgentContext",
    "AgentContextError",
    "Assembly",
    "AssemblyBlock",
    "Budget",
    "Bundle",
    "Compaction",
    "CompactionMethod",
    "CompactionSource",
    "ConfigError",
    "ContentMode",
    "ContextAssembly",
    "ContextBudget",
    "ContextCompaction",
    "ContextEnvelope",
    "ContextEvent",
    "ContextInjection",
    "ContextItem",
    "ContextKind",
    "ContextSelection",
    "ContextSourceRef",
    "ContextSummary",
    "ContextSurface",
    "ContextWindow",
    "Envelope",
    "EventClass",
    "InjectionPoint",
    "Lifecycle",
    "MissingContext",
    "MissingStatus",
    "OmissionReason",
    "OmittedRef",
    "OverflowStrategy",
    "RankingSignal",
    "RebuildInfo",
    "RecordError",
    "RedactionState",
    "Scope",
    "Selection",
    "Severity",
    "Surface",
    "TelemetryRef",
    "TruncationRecord",
    "Visibility",
    "WindowSegment",
    "__version__",
    "builtin_masker",
    "bundle_json_schema",
    "current_envelope",
    "emit_bundle",
    "records_json_schema",
    "set_content_masker",
]
