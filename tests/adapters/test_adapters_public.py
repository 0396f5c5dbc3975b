"""The adapters' public surface changes only on purpose."""

from __future__ import annotations

import otel_agent_context.adapters as adapters


def test_public_names_are_pinned() -> None:
    assert adapters.__all__ == [
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
    for name in adapters.__all__:
        assert getattr(adapters, name) is not None, name


def test_the_cli_lists_watch() -> None:
    from otel_agent_context.cli import build_parser

    help_text = build_parser().format_help()
    assert "watch" in help_text
