"""Enumerations of the Agent Context specification (seed 000, context model seed 002).

Values are exactly the seed's. Each enum is a ``StrEnum`` so members compare equal to
their string values and serialise as plain strings.
"""

from __future__ import annotations

import enum
import sys

if sys.version_info >= (3, 11):
    StrEnum = enum.StrEnum
else:  # pragma: no cover - 3.10 fallback

    class StrEnum(str, enum.Enum):
        def __str__(self) -> str:
            return str(self.value)


class Scope(StrEnum):
    TURN = "turn"
    TASK = "task"
    SESSION = "session"
    TOOL_INVOCATION = "tool_invocation"
    REVIEW = "review"
    HANDOFF = "handoff"
    CUSTOM = "custom"


class Lifecycle(StrEnum):
    DRAFT = "draft"
    AVAILABLE = "available"
    SELECTED = "selected"
    ASSEMBLED = "assembled"
    INJECTED = "injected"
    COMPACTED = "compacted"
    REDACTED = "redacted"
    EXPIRED = "expired"
    ARCHIVED = "archived"


class ContextKind(StrEnum):
    USER_MESSAGE = "user_message"
    SYSTEM_PROMPT = "system_prompt"
    DEVELOPER_INSTRUCTION = "developer_instruction"
    SESSION_HISTORY = "session_history"
    THREAD_SUMMARY = "thread_summary"
    WORKING_MEMORY = "working_memory"
    DURABLE_MEMORY = "durable_memory"
    KNOWLEDGE_PACK_ITEM = "knowledge_pack_item"
    DOCUMENT_EXCERPT = "document_excerpt"
    FILE_EXCERPT = "file_excerpt"
    ARTIFACT_REF = "artifact_ref"
    TOOL_RESULT = "tool_result"
    BROWSER_STATE = "browser_state"
    RUNTIME_STATE = "runtime_state"
    TEAM_MEMORY = "team_memory"
    POLICY_NOTE = "policy_note"
    EXTERNAL_RESOURCE = "external_resource"
    MANUAL_NOTE = "manual_note"
    COMPUTED_SUMMARY = "computed_summary"
    PEER_AGENT_MESSAGE = "peer_agent_message"
    RETRIEVAL_RESULT = "retrieval_result"
    CUSTOM = "custom"


class ContentMode(StrEnum):
    INLINE = "inline"
    REF = "ref"
    SUMMARY = "summary"
    EMBEDDED_RESOURCE = "embedded_resource"
    RESOURCE_LINK = "resource_link"
    ARTIFACT_REF = "artifact_ref"
    TOOL_RESULT_REF = "tool_result_ref"
    OPAQUE = "opaque"


class Visibility(StrEnum):
    MODEL = "model"
    TOOL = "tool"
    RUNTIME = "runtime"
    UI = "ui"
    USER = "user"
    REVIEWER = "reviewer"
    PEER_AGENT = "peer_agent"
    EVIDENCE_EXPORT = "evidence_export"


class OverflowStrategy(StrEnum):
    REJECT = "reject"
    TRUNCATE_TAIL = "truncate_tail"
    TRUNCATE_MIDDLE = "truncate_middle"
    SUMMARIZE_OLDEST = "summarize_oldest"
    SUMMARIZE_LOW_PRIORITY = "summarize_low_priority"
    DEFER_TO_RETRIEVAL = "defer_to_retrieval"
    ASK_FOR_CHOICE = "ask_for_choice"
    POLICY_BLOCK = "policy_block"
    CUSTOM = "custom"


class InjectionPoint(StrEnum):
    SYSTEM_PROMPT = "system_prompt"
    DEVELOPER_PROMPT = "developer_prompt"
    MESSAGE_HISTORY = "message_history"
    USER_MESSAGE_APPENDIX = "user_message_appendix"
    TOOL_ARGUMENT = "tool_argument"
    TOOL_VISIBLE_RESOURCE = "tool_visible_resource"
    RUNTIME_METADATA = "runtime_metadata"
    UI_PANEL = "ui_panel"
    REVIEW_EXPORT = "review_export"
    PEER_AGENT_MESSAGE = "peer_agent_message"
    ARTIFACT_INPUT = "artifact_input"
    CUSTOM = "custom"


class CompactionMethod(StrEnum):
    EXTRACTIVE_SUMMARY = "extractive_summary"
    ABSTRACTIVE_SUMMARY = "abstractive_summary"
    STRUCTURED_DIGEST = "structured_digest"
    ROLLING_SUMMARY = "rolling_summary"
    SEMANTIC_MEMORY_UPDATE = "semantic_memory_update"
    HUMAN_CURATED_SUMMARY = "human_curated_summary"
    PROVIDER_CONTEXT_EDITING = "provider_context_editing"
    CUSTOM = "custom"


class Severity(StrEnum):
    INFO = "info"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    BLOCKING = "blocking"


class RedactionState(StrEnum):
    NONE = "none"
    MASKED = "masked"
    REMOVED = "removed"
    SUMMARIZED = "summarized"
    ENCRYPTED_REF = "encrypted_ref"
    POLICY_BLOCKED = "policy_blocked"
    UNKNOWN = "unknown"


class OmissionReason(StrEnum):
    BUDGET = "budget"
    LOW_RELEVANCE = "low_relevance"
    STALE_SOURCE = "stale_source"
    POLICY_BLOCK = "policy_block"
    DUPLICATE_COVERAGE = "duplicate_coverage"
    UNSUPPORTED_MEDIA = "unsupported_media"
    PRIVACY_RISK = "privacy_risk"
    MISSING_PERMISSION = "missing_permission"
    CUSTOM = "custom"


class MissingStatus(StrEnum):
    """Status of a missing_context record. The seed leaves the values open; these are the
    states the telemetry can observe (detected, requested, resolved) plus two terminal ones."""

    OPEN = "open"
    REQUESTED = "requested"
    RESOLVED = "resolved"
    DISMISSED = "dismissed"
    CUSTOM = "custom"


class EventClass(StrEnum):
    SURFACE_CREATED = "context.surface.created"
    SURFACE_UPDATED = "context.surface.updated"
    ITEM_ADDED = "context.item.added"
    ITEM_UPDATED = "context.item.updated"
    ITEM_REMOVED = "context.item.removed"
    SELECTION_STARTED = "context.selection.started"
    SELECTION_COMPLETED = "context.selection.completed"
    BUDGET_APPLIED = "context.budget.applied"
    ASSEMBLY_CREATED = "context.assembly.created"
    INJECTION_APPLIED = "context.injection.applied"
    COMPACTION_STARTED = "context.compaction.started"
    COMPACTION_COMPLETED = "context.compaction.completed"
    SUMMARY_CREATED = "context.summary.created"
    MISSING_DETECTED = "context.missing.detected"
    MISSING_REQUESTED = "context.missing.requested"
    MISSING_RESOLVED = "context.missing.resolved"
    REDACTION_APPLIED = "context.redaction.applied"
    EXPORTED = "context.exported"


class RebuildStatus(StrEnum):
    COMPLETE = "complete"
    PARTIAL = "partial"
