"""Names of the wire contract (docs/contract.md, semconv/registry.yaml).

Every span name, event name and attribute the emitter writes or the rebuild reads comes
from here. ``context.*`` names are this project's; ``gen_ai.*``, ``mcp.*``, ``user.*`` and
``error.type`` are the OpenTelemetry semantic conventions' own, kept as constants because
``opentelemetry-semantic-conventions`` lacks the newest of them. A test keeps this module,
the registry and the docs table in agreement.
"""

from __future__ import annotations

from ._table import METRICS as _METRICS

SCHEMA_VERSION = "0.1"
SCHEMA_URL = "https://otel-agent-context.dev/schemas/0.2"

# --- span names ---------------------------------------------------------------------------
SPAN_ENVELOPE = "context.envelope"
SPAN_SURFACE = "context.surface"
SPAN_SELECTION = "context.selection"
SPAN_BUDGET = "context.budget"
SPAN_ASSEMBLY = "context.assembly"
SPAN_COMPACTION = "context.compaction"
SPAN_ITEMS = "context.items"

# --- event names --------------------------------------------------------------------------
EVENT_ITEM_ADDED = "context.item.added"
EVENT_ITEM_UPDATED = "context.item.updated"
EVENT_ITEM_REMOVED = "context.item.removed"
EVENT_ITEM_SELECTED = "context.item.selected"
EVENT_ITEM_OMITTED = "context.item.omitted"
EVENT_BUDGET_TRUNCATED = "context.budget.truncated"
EVENT_WINDOW_SEGMENT = "context.window.segment"
EVENT_ASSEMBLY_BLOCK = "context.assembly.block"
EVENT_INJECTION_APPLIED = "context.injection.applied"
EVENT_COMPACTION_SOURCE = "context.compaction.source"
EVENT_SUMMARY_CREATED = "context.summary.created"
EVENT_MISSING_DETECTED = "context.missing.detected"
EVENT_MISSING_REQUESTED = "context.missing.requested"
EVENT_MISSING_RESOLVED = "context.missing.resolved"
EVENT_REDACTION_APPLIED = "context.redaction.applied"

#: Item events that count toward the 100-per-span limit and move to ``context.items``.
ITEM_EVENTS = frozenset({
    EVENT_ITEM_ADDED, EVENT_ITEM_UPDATED, EVENT_ITEM_REMOVED, EVENT_ITEM_SELECTED,
    EVENT_ITEM_OMITTED, EVENT_BUDGET_TRUNCATED, EVENT_ASSEMBLY_BLOCK, EVENT_COMPACTION_SOURCE,
})
MAX_ITEM_EVENTS_PER_SPAN = 100

# --- 2.1 envelope ---------------------------------------------------------------------------
CONTEXT_ID = "context.id"
CONTEXT_SCOPE = "context.scope"
CONTEXT_LIFECYCLE = "context.lifecycle"
CONTEXT_SCHEMA_VERSION = "context.schema_version"
CONTEXT_PRODUCER = "context.producer"
CONTEXT_PARENT_ID = "context.parent_id"
CONTEXT_SPAN_COUNT = "context.span_count"
CONTEXT_EVENT_COUNT = "context.event_count"
CONTEXT_ACTOR_REFS = "context.actor_refs"
CONTEXT_RUNTIME_REFS = "context.runtime_refs"
CONTEXT_POLICY_REFS = "context.policy_refs"
CONTEXT_EVIDENCE_REFS = "context.evidence_refs"

# --- 2.2 item and source ref -----------------------------------------------------------------
ITEM_ID = "context.item.id"
ITEM_KIND = "context.item.kind"
ITEM_CONTENT_MODE = "context.item.content_mode"
ITEM_TITLE = "context.item.title"  # content
ITEM_CONTENT = "context.item.content"  # content
ITEM_CONTENT_REF = "context.item.content_ref"
ITEM_MIME_TYPE = "context.item.mime_type"
ITEM_LANGUAGE = "context.item.language"
ITEM_TOKEN_ESTIMATE = "context.item.token_estimate"
ITEM_BYTE_SIZE = "context.item.byte_size"
ITEM_FRESHNESS = "context.item.freshness"
ITEM_TRUST_LEVEL = "context.item.trust_level"
ITEM_SENSITIVITY = "context.item.sensitivity"
ITEM_REDACTION_STATE = "context.item.redaction_state"
ITEM_VISIBILITY = "context.item.visibility"
ITEM_PRIORITY = "context.item.priority"
ITEM_DIGEST = "context.item.digest"
ITEM_CREATED_AT = "context.item.created_at"  # added in 0.1: item creation time, not event time

SOURCE_ID = "context.source.id"
SOURCE_URI = "context.source.uri"
SOURCE_KIND = "context.source.kind"
SOURCE_SELECTOR = "context.source.selector"
SOURCE_DIGEST = "context.source.digest"
SOURCE_AUTHORITY = "context.source.authority"
SOURCE_LICENSE = "context.source.license"
SOURCE_RETRIEVED_AT = "context.source.retrieved_at"
SOURCE_MODIFIED_AT = "context.source.modified_at"
SOURCE_PROVENANCE_REFS = "context.source.provenance_refs"
SOURCE_NATIVE_PREFIX = "context.source.native."

# --- 2.3 surface -------------------------------------------------------------------------------
SURFACE_ID = "context.surface.id"
SURFACE_ITEM_COUNT = "context.surface.item_count"
SURFACE_TOKEN_ESTIMATE = "context.surface.token_estimate"

# --- 2.4 selection -----------------------------------------------------------------------------
SELECTION_ID = "context.selection.id"
SELECTION_INTENT = "context.selection.intent"
SELECTION_QUERY = "context.selection.query"  # content
SELECTION_POLICY = "context.selection.policy"
SELECTION_RATIONALE = "context.selection.rationale"  # content
SELECTION_CANDIDATE_COUNT = "context.selection.candidate_count"
SELECTION_SELECTED_COUNT = "context.selection.selected_count"
SELECTION_OMITTED_COUNT = "context.selection.omitted_count"
SELECTION_ACTOR_REF = "context.selection.actor_ref"
SELECTION_MODEL_REF = "context.selection.model_ref"
SELECTION_RANK = "context.selection.rank"
SELECTION_SCORE = "context.selection.score"
SELECTION_SIGNAL_PREFIX = "context.selection.signal."
OMISSION_REASON = "context.omission.reason"
OMISSION_DETAIL = "context.omission.detail"

# --- 2.5 budget and window -----------------------------------------------------------------------
BUDGET_ID = "context.budget.id"
BUDGET_TARGET = "context.budget.target"
BUDGET_MAX_TOKENS = "context.budget.max_tokens"
BUDGET_RESERVED_TOKENS = "context.budget.reserved_tokens"
BUDGET_MAX_BYTES = "context.budget.max_bytes"
BUDGET_MAX_ITEMS = "context.budget.max_items"
BUDGET_ACTUAL_TOKENS = "context.budget.actual_tokens"
BUDGET_ACTUAL_BYTES = "context.budget.actual_bytes"
BUDGET_ACTUAL_ITEMS = "context.budget.actual_items"
BUDGET_OVERFLOW_STRATEGY = "context.budget.overflow_strategy"
BUDGET_OVERFLOW = "context.budget.overflow"
BUDGET_OVERFLOW_TOKENS = "context.budget.overflow_tokens"
BUDGET_UTILIZATION = "context.budget.utilization"
WINDOW_ID = "context.window.id"
TRUNCATION_STRATEGY = "context.truncation.strategy"
TRUNCATION_TOKENS_BEFORE = "context.truncation.tokens_before"
TRUNCATION_TOKENS_AFTER = "context.truncation.tokens_after"
WINDOW_SEGMENT = "context.window.segment"
WINDOW_ORDER = "context.window.order"
WINDOW_RESERVED_TOKENS = "context.window.reserved_tokens"
WINDOW_USED_TOKENS = "context.window.used_tokens"
# the folded form (contract v0.2): a model call's window segments as parallel arrays
WINDOW_SEGMENT_NAMES = "context.window.segment_names"
WINDOW_SEGMENT_ORDERS = "context.window.segment_orders"
WINDOW_SEGMENT_RESERVED_TOKENS = "context.window.segment_reserved_tokens"
WINDOW_SEGMENT_USED_TOKENS = "context.window.segment_used_tokens"

# --- 2.6 assembly --------------------------------------------------------------------------------
ASSEMBLY_ID = "context.assembly.id"
ASSEMBLY_TARGET = "context.assembly.target"
ASSEMBLY_BLOCK_COUNT = "context.assembly.block_count"
ASSEMBLY_TOKEN_COUNT = "context.assembly.token_count"
ASSEMBLY_HASH = "context.assembly.hash"
ASSEMBLY_WRAPPING_POLICY = "context.assembly.wrapping_policy"
ASSEMBLY_SEPARATOR_POLICY = "context.assembly.separator_policy"
ASSEMBLY_REDACTION_STATE = "context.assembly.redaction_state"
ASSEMBLY_VISIBILITY = "context.assembly.visibility"
BLOCK_INDEX = "context.block.index"
BLOCK_TOKENS = "context.block.tokens"
BLOCK_DIGEST = "context.block.digest"
BLOCK_SOURCE_ITEM_REFS = "context.block.source_item_refs"
# the folded form (contract v0.2): a model call's blocks as parallel arrays
ASSEMBLY_BLOCK_ITEM_IDS = "context.assembly.block_item_ids"
ASSEMBLY_BLOCK_KINDS = "context.assembly.block_kinds"
ASSEMBLY_BLOCK_TOKENS = "context.assembly.block_tokens"
ASSEMBLY_BLOCK_INJECTION_POINTS = "context.assembly.block_injection_points"
ASSEMBLY_BLOCK_DIGESTS = "context.assembly.block_digests"
ASSEMBLY_BLOCK_SOURCE_COUNTS = "context.assembly.block_source_counts"
ASSEMBLY_BLOCK_SOURCE_ITEM_REFS = "context.assembly.block_source_item_refs"
ASSEMBLY_BLOCK_CONTENT_MODES = "context.assembly.block_content_modes"
ASSEMBLY_BLOCK_CONTENT_REFS = "context.assembly.block_content_refs"
ASSEMBLY_BLOCK_TOOL_CALL_IDS = "context.assembly.block_tool_call_ids"
ASSEMBLY_BLOCK_RESPONSE_IDS = "context.assembly.block_response_ids"
ASSEMBLY_BLOCK_CONTENTS = "context.assembly.block_contents"

# --- 2.7 injection --------------------------------------------------------------------------------
INJECTION_ID = "context.injection.id"
INJECTION_TARGET = "context.injection.target"
INJECTION_POINT = "context.injection.point"
INJECTION_NATIVE_ID = "context.injection.native_id"
INJECTION_HASH = "context.injection.hash"
INJECTION_FINAL_REF = "context.injection.final_ref"
INJECTION_VISIBILITY = "context.injection.visibility"

# --- 2.8 compaction and summary -----------------------------------------------------------------
COMPACTION_ID = "context.compaction.id"
COMPACTION_SCOPE = "context.compaction.scope"
COMPACTION_METHOD = "context.compaction.method"
COMPACTION_TRIGGER = "context.compaction.trigger"
COMPACTION_SOURCE_COUNT = "context.compaction.source_count"
COMPACTION_TOKENS_BEFORE = "context.compaction.tokens_before"
COMPACTION_TOKENS_AFTER = "context.compaction.tokens_after"
COMPACTION_COVERAGE = "context.compaction.coverage"
COMPACTION_LOSS_NOTES = "context.compaction.loss_notes"
COMPACTION_VALIDATION = "context.compaction.validation"
COMPACTION_REPLACEMENT_POLICY = "context.compaction.replacement_policy"
COMPACTION_COVERED = "context.compaction.covered"
SUMMARY_ID = "context.summary.id"
SUMMARY_TOKEN_ESTIMATE = "context.summary.token_estimate"
SUMMARY_REFRESH_POLICY = "context.summary.refresh_policy"
SUMMARY_DIGEST = "context.summary.digest"
SUMMARY_CONTENT = "context.summary.content"  # content

# --- 2.9 missing context -----------------------------------------------------------------------
MISSING_ID = "context.missing.id"
MISSING_QUESTION = "context.missing.question"  # content
MISSING_NEEDED_FOR = "context.missing.needed_for"
MISSING_SEVERITY = "context.missing.severity"
MISSING_CANDIDATE_SOURCES = "context.missing.candidate_sources"
MISSING_BLOCKED_ACTIONS = "context.missing.blocked_actions"
MISSING_REQUESTED_FROM = "context.missing.requested_from"
MISSING_STATUS = "context.missing.status"
MISSING_SCOPE = "context.missing.scope"
MISSING_RESOLUTION_REFS = "context.missing.resolution_refs"

# --- 2.10 redaction ------------------------------------------------------------------------------
REDACTION_STATE = "context.redaction.state"
REDACTION_METHOD = "context.redaction.method"
REDACTION_REDACTED_BY = "context.redaction.redacted_by"
POLICY_REF = "context.policy.ref"

# --- overflow spans ---------------------------------------------------------------------------
ITEMS_STAGE = "context.items.stage"
ITEMS_PART = "context.items.part"

#: Attributes that may hold user or model text: recorded only under content capture.
CONTENT_ATTRIBUTES = frozenset({
    ITEM_TITLE, ITEM_CONTENT, SELECTION_QUERY, SELECTION_RATIONALE, SUMMARY_CONTENT,
    MISSING_QUESTION, ASSEMBLY_BLOCK_CONTENTS,
})

# --- reused OpenTelemetry names -----------------------------------------------------------------
GEN_AI_OPERATION_NAME = "gen_ai.operation.name"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
GEN_AI_USAGE_CACHE_READ_INPUT_TOKENS = "gen_ai.usage.cache_read.input_tokens"
GEN_AI_USAGE_CACHE_WRITE_INPUT_TOKENS = "gen_ai.usage.cache_write.input_tokens"
GEN_AI_CONVERSATION_ID = "gen_ai.conversation.id"
GEN_AI_CONVERSATION_COMPACTED = "gen_ai.conversation.compacted"
GEN_AI_AGENT_ID = "gen_ai.agent.id"
GEN_AI_AGENT_NAME = "gen_ai.agent.name"
GEN_AI_AGENT_DESCRIPTION = "gen_ai.agent.description"
GEN_AI_AGENT_VERSION = "gen_ai.agent.version"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"
GEN_AI_TOOL_TYPE = "gen_ai.tool.type"
GEN_AI_DATA_SOURCE_ID = "gen_ai.data_source.id"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
MCP_RESOURCE_URI = "mcp.resource.uri"
MCP_SESSION_ID = "mcp.session.id"
JSONRPC_REQUEST_ID = "jsonrpc.request.id"
GEN_AI_PROMPT_NAME = "gen_ai.prompt.name"
USER_ID = "user.id"
ERROR_TYPE = "error.type"

#: Reused GenAI/user attributes the envelope span may carry; rebuilt into envelope metadata.
ENVELOPE_REUSED = (
    GEN_AI_CONVERSATION_ID, GEN_AI_AGENT_NAME, GEN_AI_AGENT_ID, GEN_AI_REQUEST_MODEL, USER_ID,
)

#: Native ids that have an OpenTelemetry name of their own: external_mappings key <-> attribute.
NATIVE_REUSED = {
    "mcp.resource_uri": MCP_RESOURCE_URI,
    "mcp.mcp_session_id": MCP_SESSION_ID,
    "mcp.jsonrpc_request_id": JSONRPC_REQUEST_ID,
    "mcp.prompt_name": GEN_AI_PROMPT_NAME,
    "model_api.tool_call_id": GEN_AI_TOOL_CALL_ID,
    "model_api.response_id": GEN_AI_RESPONSE_ID,
    "opentelemetry.data_source_id": GEN_AI_DATA_SOURCE_ID,
}

# --- metrics (OpenTelemetry names; Prometheus adds _total / _ratio) ------------------------------
METRIC_ENVELOPES = "context.envelopes"
METRIC_BUDGET_UTILIZATION = "context.budget.utilization"
METRIC_BUDGET_OVERFLOWS = "context.budget.overflows"
METRIC_TRUNCATIONS = "context.truncations"
METRIC_TRUNCATED_TOKENS = "context.truncated_tokens"
METRIC_ITEMS_SELECTED = "context.items.selected"
METRIC_ITEMS_OMITTED = "context.items.omitted"
METRIC_ITEMS_NOT_INJECTED = "context.items.not_injected"
METRIC_OMITTED_TOKENS = "context.omitted_tokens"
METRIC_INJECTIONS = "context.injections"
METRIC_COMPACTIONS = "context.compactions"
METRIC_COMPACTION_COVERAGE = "context.compaction.coverage"
METRIC_COMPACTION_UNCOVERED_SOURCES = "context.compaction.uncovered_sources"
METRIC_COMPACTION_LOSS_NOTES = "context.compaction.loss_notes"
METRIC_MISSING_DETECTED = "context.missing.detected"
METRIC_MISSING_RESOLVED = "context.missing.resolved"

#: OpenTelemetry metric name -> Prometheus exposition name of contract section 3 (the table).
PROMETHEUS_NAMES = {name: spec.prometheus_name for name, spec in _METRICS.items()}

#: Label names of each metric (contract section 3). Never an id of any kind.
METRIC_LABELS = {name: tuple(label for label, _ in spec.labels)
                 for name, spec in _METRICS.items()}

ALERT_NAMES = (
    "AgentContextTruncation",
    "AgentContextBlockingMissing",
    "AgentContextBudgetOverflowHigh",
    "AgentContextCompactionLoss",
    "AgentContextPartialEnvelopes",
)

# --- adapters: Context Runtime ABI rule checks ---------------------------------------------------
# Added with the seeds' runtimes adapters (otel_agent_context.adapters, docs/runtimes.md): an
# extension of contract v0.1. A ``context.runtime.rule_breach`` event sits on the envelope span
# of the session state it was found in; the rebuilt bundle does not carry it (v0.1 has no record
# for it), the adapter also logs it.
EVENT_RUNTIME_RULE_BREACH = "context.runtime.rule_breach"
RUNTIME_RULE = "context.runtime.rule"  # e.g. messages_append_only
RUNTIME_RULE_LEVEL = "context.runtime.rule_level"  # must | should (the seed's keyword)
RUNTIME_RULE_DETAIL = "context.runtime.rule_detail"
RUNTIME_PATH = "context.runtime.path"  # the file concerned, relative to the session folder
