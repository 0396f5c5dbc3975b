"""A guardrail tripwire: the guardrail's decision as a policy ref, what it blocked as missing
context of severity ``blocking``.

The standard records policy facts and leaves the decisions to their owners: a tripped
guardrail is the application's policy decision, so the run's envelope names it in
``context.policy_refs`` (``openai_agents.guardrail:<input|output|tool_input|tool_output>:<the
guardrail's name>``), and a ``context.missing.detected`` record (severity ``blocking``, its id
the same ref, status ``open``) says which action could not go on: ``agent_run`` (an input
guardrail: the agent's answer never came), ``final_output`` (an output guardrail: the answer
was withheld), ``tool_call`` / ``tool_result`` (a tool guardrail that raised). The
guardrail's ``output_info`` is the application's content: never recorded.
"""

from __future__ import annotations

from typing import Any

from ..._api import Envelope
from ..._enums import RedactionState, Severity
from ..._semconv import CONTEXT_POLICY_REFS

__all__ = ["record_rejection", "record_tripwire"]

#: exception class -> (guardrail kind, the action it blocked)
_TRIPWIRES = {
    "InputGuardrailTripwireTriggered": ("input", "agent_run"),
    "OutputGuardrailTripwireTriggered": ("output", "final_output"),
    "ToolInputGuardrailTripwireTriggered": ("tool_input", "tool_call"),
    "ToolOutputGuardrailTripwireTriggered": ("tool_output", "tool_result"),
}


def _name(guardrail: Any) -> str:
    get_name = getattr(guardrail, "get_name", None)
    if callable(get_name):
        name = get_name()
        if isinstance(name, str) and name:
            return name
    name = getattr(guardrail, "name", None)
    return name if isinstance(name, str) and name else type(guardrail).__name__


def _add_policy_ref(env: Envelope, ref: str) -> None:
    span = env.span
    existing = getattr(span, "attributes", None) or {}
    refs = tuple(existing.get(CONTEXT_POLICY_REFS, ()))
    if ref not in refs:
        span.set_attribute(CONTEXT_POLICY_REFS, (*refs, ref))


def record_rejection(env: Envelope, kind: str, guardrail: Any, data: Any, output: Any
                     ) -> None:
    """Record a tool guardrail's ``output`` in ``env`` when it rejected content (``kind``:
    ``tool_input`` or ``tool_output``; ``data``: what the guardrail was given)."""
    behavior = getattr(output, "behavior", None)
    if not isinstance(behavior, dict) or behavior.get("type") != "reject_content":
        return
    call_id = getattr(getattr(data, "context", None), "tool_call_id", None)
    if not isinstance(call_id, str) or not call_id:
        return
    name = _name(guardrail)
    ref = f"openai_agents.guardrail:{kind}:{name}"
    _add_policy_ref(env, ref)
    item_id = f"tool_result:{call_id}"
    env.redaction(item_id, state=RedactionState.POLICY_BLOCKED, method="reject_content",
                  redacted_by=name, policy_ref=ref)
    if kind == "tool_input":
        env.missing(missing_id=f"{ref}:{call_id}", needed_for=item_id,
                    severity=Severity.HIGH, blocked_actions=("tool_call",), status="open")


def record_tripwire(env: Envelope, error: BaseException) -> None:
    """Record ``error`` in ``env`` when it is a guardrail tripwire (else nothing)."""
    spec = _TRIPWIRES.get(type(error).__name__)
    if spec is None:
        return
    kind, blocked = spec
    result = getattr(error, "guardrail_result", None)
    guardrail = getattr(result, "guardrail", None) if result is not None else None
    if guardrail is None:
        guardrail = getattr(error, "guardrail", None)
    ref = f"openai_agents.guardrail:{kind}:{_name(guardrail)}"
    _add_policy_ref(env, ref)
    env.missing(missing_id=ref, needed_for=blocked, severity=Severity.BLOCKING,
                blocked_actions=(blocked,), status="open")
