"""Adapters for the seeds' runtimes: Context Runtime ABI session folders and ContextOS.

Context Runtime ABI (seed 003), one envelope per pack build of a session folder::

    from otel_agent_context import AgentContext
    from otel_agent_context.adapters import SessionWatcher, emit_session

    emit_session("/ctx/home/1000/agent/coder/session/default", AgentContext())
    SessionWatcher(path, AgentContext()).run(interval=1.0)   # or: otel-agent-context watch

ContextOS (seed 004), one envelope per ``invokeAgent`` call, in the caller's trace::

    from otel_agent_context.adapters import current_invocation, wrap_invoke_agent

    @wrap_invoke_agent(AgentContext())
    def invoke_agent(request_envelope, run_context):
        current_invocation().compiled(compiled_context)
        ...
        return decision_record

Mappings, field by field: ``docs/runtimes.md``.
"""

from ._abi import (
    RULES,
    FileState,
    RuleBreach,
    SessionSnapshot,
    check_history,
    emit_rule_breaches,
    emit_session,
    emit_snapshot,
    read_session,
    session_bundle,
)
from ._contextos import (
    AgentInvocation,
    ContextOSRefs,
    ToolResultRecords,
    compiled_context_bundle,
    contextos_bundle,
    current_invocation,
    decision_refs,
    pack_ref_gaps,
    run_context_refs,
    tool_call_injection,
    tool_result_records,
    trace_parent,
    wrap_invoke_agent,
)
from ._watch import SessionWatcher

__all__ = [
    "RULES",
    "AgentInvocation",
    "ContextOSRefs",
    "FileState",
    "RuleBreach",
    "SessionSnapshot",
    "SessionWatcher",
    "ToolResultRecords",
    "check_history",
    "compiled_context_bundle",
    "contextos_bundle",
    "current_invocation",
    "decision_refs",
    "emit_rule_breaches",
    "emit_session",
    "emit_snapshot",
    "pack_ref_gaps",
    "read_session",
    "run_context_refs",
    "session_bundle",
    "tool_call_injection",
    "tool_result_records",
    "trace_parent",
    "wrap_invoke_agent",
]
