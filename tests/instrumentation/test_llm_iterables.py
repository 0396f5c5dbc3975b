"""Generators are valid request parameters for both SDKs (``Iterable[...]``): reading the
request for telemetry must not consume what the SDK then sends."""

from __future__ import annotations

import anthropic
import openai

SYSTEM = "You are a careful support agent. " * 20


def _messages(one_shot: bool):
    parts = [{"type": "text", "text": "hello there"}]
    message = {"role": "user", "content": (p for p in parts) if one_shot else parts}
    return (m for m in [message]) if one_shot else [message]


def _usage(stub, one_shot: bool) -> tuple[int, int]:
    oc = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)
    system = [{"type": "text", "text": SYSTEM}]
    chat = oc.chat.completions.create(model="gpt-4o", messages=_messages(one_shot))
    message = ac.messages.create(model="claude-3-haiku", max_tokens=50,
                                 system=(b for b in system) if one_shot else system,
                                 messages=_messages(one_shot))
    return chat.usage.prompt_tokens, message.usage.input_tokens


def test_generators_reach_the_provider_unconsumed(alone, stub) -> None:
    # the provider (stub) counts what it received: generators and lists must agree
    assert _usage(stub, one_shot=True) == _usage(stub, one_shot=False)
    bundles = alone.tel.bundles()
    assert len(bundles) == 4
    counts = [b["context_assemblies"][0]["block_count"] for b in bundles]
    assert counts[:2] == counts[2:]  # the telemetry saw the same messages both ways


def test_generators_reach_the_provider_through_the_stream_helper(alone, stub) -> None:
    # messages.stream() keeps the kwargs and sends them on __enter__, after we read them
    ac = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test", max_retries=0)

    def input_tokens(one_shot: bool) -> int:
        with ac.messages.stream(model="claude-3-haiku", max_tokens=50,
                                messages=_messages(one_shot)) as stream:
            return stream.get_final_message().usage.input_tokens

    assert input_tokens(one_shot=True) == input_tokens(one_shot=False)
    counts = [b["context_assemblies"][0]["block_count"] for b in alone.tel.bundles()]
    assert counts[0] == counts[1] > 0
