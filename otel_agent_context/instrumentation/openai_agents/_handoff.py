"""A handoff as context passed from one agent to the next.

``execute_handoffs`` (``agents.run_internal.turn_resolution``) is wrapped: when it returns
the next step (a handoff to a new agent), an envelope of scope ``handoff`` is recorded,
``gen_ai.agent.name`` the agent handed to, ``context.parent_id`` the run's envelope, with a
selection whose selected items are the history that went across (the run's input and the
items generated so far, as the SDK hands them to the next agent) and whose omitted items
are those the handoff's ``input_filter`` (or the run's ``handoff_input_filter``) removed
(reason ``custom``, detail the filter's name).

Item ids: those the OpenAI instrumentor gives the same items in the next model call's
assembly (the SDK hands them to the model as its Responses API input), so one message has
one id on both sides of the handoff and in the assemblies before and after it. Known gap: a
message repeated in the history is ``<id>#2`` by position; when the ``input_filter`` drops
its earlier copy, the kept one is numbered again (``<id>``), as the next assembly numbers it,
so its id differs from the one it had before the handoff.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace

from ..._api import AgentContext, current_envelope
from ..._enums import OmissionReason, Scope
from ..._records import ContextItem
from .._common import distinct_ids
from ..openai._extract import responses_request

__all__ = ["filter_name", "record_handoff"]


def _raw(item: Any) -> Any:
    to_input = getattr(item, "to_input_item", None)
    if callable(to_input):
        return to_input()
    return item


def _items(raws: list[Any], capture: bool) -> list[ContextItem]:
    """The history as the next model call will name it: the OpenAI instrumentor reads the
    same items as the Responses API input, so a message has one id on both sides of the
    handoff and in the next agent's assembly (``user:<digest>``, ``tool_call:<call id>``,
    ``tool_result:<call id>``, the SDK's own ``msg_…`` ids; a repeat ``#2``)."""
    request = responses_request((), {"input": raws}, capture)
    distinct_ids(request.blocks)
    return [block.item for block in request.blocks]


def _history(original_input: Any, *groups: Any) -> list[Any]:
    if isinstance(original_input, str):
        out: list[Any] = [{"role": "user", "content": original_input}]
    else:
        out = list(original_input or ())
    for group in groups:
        out.extend(_raw(i) for i in group or ())
    return out


def record_handoff(ctx: AgentContext, kwargs: dict[str, Any], result: Any,
                   filter_name: str | None) -> None:
    """Record the handoff ``execute_handoffs`` (called with ``kwargs``) returned."""
    new_agent = getattr(getattr(result, "next_step", None), "new_agent", None)
    if new_agent is None:
        return
    before = _history(kwargs.get("original_input"), kwargs.get("pre_step_items"),
                      kwargs.get("new_step_items"))
    after = _history(result.original_input, result.pre_step_items, result.new_step_items)
    parent = current_envelope()
    from_agent = getattr(kwargs.get("public_agent"), "name", None)
    # a child of the run's envelope span (the current span may be the official agents
    # instrumentor's agent span, under it)
    token = otel_context.attach(trace.set_span_in_context(parent.span)) if parent else None
    try:
        env = ctx.envelope(scope=Scope.HANDOFF, agent_name=getattr(new_agent, "name", None),
                           parent_id=parent.context_id if parent is not None else None)
    finally:
        if token is not None:
            otel_context.detach(token)
    with env:
        env.span.set_attribute("openai_agents.handoff.from_agent", str(from_agent))
        capture = ctx.capture_content
        kept = _items(after, capture)
        kept_ids = {it.item_id for it in kept}
        with env.selection(policy="handoff", intent="handoff") as sel:
            for rank, it in enumerate(kept):
                sel.selected(it, rank=rank)
            for it in _items(before, capture):
                if it.item_id not in kept_ids:
                    sel.omitted(it, reason=OmissionReason.CUSTOM,
                                detail=f"input_filter:{filter_name}" if filter_name
                                else "input_filter")


def filter_name(kwargs: dict[str, Any]) -> str | None:
    """The name of the input filter the handoff will apply (its own, else the run's)."""
    handoffs = kwargs.get("run_handoffs") or ()
    handoff = getattr(handoffs[0], "handoff", None) if handoffs else None
    fn = getattr(handoff, "input_filter", None)
    if fn is None:
        fn = getattr(kwargs.get("run_config"), "handoff_input_filter", None)
    if fn is None:
        return None
    return str(getattr(fn, "__qualname__", None) or type(fn).__name__)
