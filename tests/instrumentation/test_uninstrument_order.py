"""Taking our instrumentors off while the official GenAI ones stay on, whichever wraps the
other: ours takes off its own wrapper and no one else's (``unwrap`` takes off the outermost,
whoever's it is: with the official one instrumented after ours, uninstrumenting ours took the
official one's wrapper off and left ours recording). The real official instrumentors and
clients on the stub."""

from __future__ import annotations

from typing import Any

import anthropic
import openai
import pytest
import wrapt
from anthropic.resources.messages import Messages
from llm_setup import _official
from openai.resources.chat.completions import Completions

from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

_PROXY = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


def _layers(owner: type, name: str) -> list[str]:
    """The modules of the wrapper functions on ``owner.name``, outermost first."""
    out = []
    layer = vars(owner)[name]
    while isinstance(layer, _PROXY):
        out.append(layer._self_wrapper.__module__.split(".")[0] + "." +
                   layer._self_wrapper.__module__.split(".")[-1])
        layer = layer.__wrapped__
    return out


def _calls(stub: Any) -> None:
    openai.OpenAI(base_url=stub.openai_base_url, api_key="sk", max_retries=0
                  ).chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Where is my order?"}])
    anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk", max_retries=0
                        ).messages.create(
        model="claude-sonnet-4-6", max_tokens=50,
        messages=[{"role": "user", "content": "Where is my order?"}])


def _spans(tel: CapturedTelemetry, stub: Any) -> list[tuple[str, bool]]:
    """Each call's spans: (its name, whether it carries our attributes)."""
    tel.span_exporter.clear()
    _calls(stub)
    return [(s.name, S.ASSEMBLY_BLOCK_ITEM_IDS in (s.attributes or {}))
            for s in tel.spans()]


@pytest.mark.parametrize("first_off", ["ours", "official"])
@pytest.mark.parametrize("ours_first", [True, False],
                         ids=["official outermost", "ours outermost"])
def test_ours_taken_off_leaves_the_official_wrapper(stub, ours_first: bool,
                                                    first_off: str) -> None:
    """Ours off, the official one's spans go on; ours on again (outermost now), then both
    off in either order: the original methods back (the official one's ``unwrap``, ours
    outside it, takes ours off in place of its own: ours then takes off what it left)."""
    originals = (vars(Completions)["create"], vars(Messages)["create"])
    tel = CapturedTelemetry()
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider}
    ours = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
    theirs = _official()
    order = [(i, {**kw, "agent_context": tel.agent_context}) for i in ours] + \
        [(i, kw) for i in theirs]
    if not ours_first:
        order.reverse()
    try:
        for inst, args in order:
            inst.instrument(**args)
        assert _spans(tel, stub) == [("chat gpt-4o-mini", True),
                                     ("chat claude-sonnet-4-6", True)]
        for inst in ours:
            inst.uninstrument()
        for owner in (Completions, Messages):
            assert len(_layers(owner, "create")) == 1
            assert "otel_agent_context" not in _layers(owner, "create")[0]
        # the official spans still, none of ours
        assert _spans(tel, stub) == [("chat gpt-4o-mini", False),
                                     ("chat claude-sonnet-4-6", False)]
        for inst, args in order[:2] if ours_first else order[2:]:
            inst.instrument(**args)  # ours again, outermost now: one wrapper of ours
        for owner in (Completions, Messages):
            assert len(_layers(owner, "create")) == 2
            assert "otel_agent_context" in _layers(owner, "create")[0]
        assert _spans(tel, stub) == [("chat gpt-4o-mini", True),
                                     ("chat claude-sonnet-4-6", True)]
        for inst in (ours + theirs if first_off == "ours" else theirs + ours):
            inst.uninstrument()
        # nothing left on: the very functions (a wrapper compares equal to what it wraps)
        assert vars(Completions)["create"] is originals[0]
        assert vars(Messages)["create"] is originals[1]
    finally:
        for inst in ours + theirs:
            inst.uninstrument()
        tel.shutdown()
