"""Cheaper forms of a call's start, each against the plain form it replaced (pure speed
changes: these guard that the answers stay the same): the window layout's sums
(``_segments``), an id's text (``_Ids.new``), and the current context read once for the
parent, the light mode and the invocation (``_start_context``)."""

from __future__ import annotations

import contextvars
import random
from typing import Any

import pytest
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY
from opentelemetry.util.genai.invocation import InferenceData

from otel_agent_context import AgentContext, _api, _envelope
from otel_agent_context.instrumentation import _common, _inference
from otel_agent_context.instrumentation._common import (
    SEG_DEVELOPER,
    SEG_HISTORY,
    SEG_SYSTEM,
    SEG_TOOLS,
    Block,
    Request,
)


def _plain_segments(req: Request) -> list[Any]:
    """The layout as summed block by block (the form before the runs' sums)."""
    used: dict[str, int] = {}
    for b in req.blocks:
        used[b.segment] = used.get(b.segment, 0) + b.tokens
    if req.tool_tokens:
        used[SEG_TOOLS] = req.tool_tokens
    out: list[Any] = []
    for seg in (SEG_SYSTEM, SEG_DEVELOPER, SEG_TOOLS, SEG_HISTORY):
        if seg in used:
            out.append((seg, len(out), None, used[seg]))
    if req.reserved_output is not None:
        out.append(("output", len(out), req.reserved_output, None))
    running = 0
    n = 0
    for b in req.blocks:
        running += b.tokens
        if b.cache_breakpoint:
            n += 1
            out.append((f"cache_prefix_{n}", None, None, running))
    return out


def _request(segments: list[str], rng: random.Random) -> Request:
    blocks = [Block(f"m:{i}", "message", "message_history", seg, rng.randrange(0, 500),
                    cache_breakpoint=rng.random() < 0.2)
              for i, seg in enumerate(segments)]
    req = Request("openai", "gpt-4o-mini", reserved_output=rng.choice([None, 0, 300]),
                  tool_tokens=rng.choice([0, 0, 42]))
    req.blocks = blocks
    return req


SHAPES = [
    [], [SEG_HISTORY], [SEG_HISTORY] * 5, [SEG_SYSTEM] + [SEG_HISTORY] * 9,
    [SEG_SYSTEM, SEG_SYSTEM, SEG_HISTORY], [SEG_DEVELOPER, SEG_HISTORY],
    [SEG_HISTORY, SEG_SYSTEM],  # a run, then another, in an order the layout reverses
    [SEG_SYSTEM, SEG_HISTORY, SEG_SYSTEM],  # the first segment again at the end
    [SEG_SYSTEM, SEG_HISTORY, SEG_SYSTEM, SEG_SYSTEM],
    [SEG_SYSTEM, SEG_SYSTEM, SEG_HISTORY, SEG_SYSTEM],
    [SEG_SYSTEM, SEG_DEVELOPER, SEG_HISTORY], [SEG_SYSTEM, SEG_HISTORY, SEG_DEVELOPER],
    [SEG_HISTORY, SEG_SYSTEM, SEG_HISTORY],
]


@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_segments_equal_the_block_by_block_sums(shape: int) -> None:
    rng = random.Random(shape)
    for _ in range(20):
        req = _request(SHAPES[shape], rng)
        assert _common._segments(req) == _plain_segments(req)


def test_segments_of_random_layouts_equal_the_block_by_block_sums() -> None:
    rng = random.Random(7)
    names = [SEG_SYSTEM, SEG_DEVELOPER, SEG_HISTORY, "other"]
    for _ in range(2000):
        segments = [rng.choice(names[:rng.randrange(1, 5)])
                    for _ in range(rng.randrange(0, 12))]
        req = _request(segments, rng)
        assert _common._segments(req) == _plain_segments(req), segments


def test_an_id_is_the_prefix_and_64_random_bits_in_16_hex_digits() -> None:
    ids = _api._Ids()
    ids._rand = random.Random(3)
    reference = random.Random(3)
    for prefix in ("ctx", "bud", "asm", "inj") * 50:
        assert ids.new(prefix) == f"{prefix}_{reference.getrandbits(64):016x}"


def _old_parent_and_mode() -> tuple[Any, Any]:
    """The parent and light mode as read before (each read of the current context its
    own): ``_parent_context`` then ``light_mode``."""
    parent = _envelope._run_envelope_parent()
    ctx = parent if parent is not None else otel_context.get_current()
    if otel_context.get_value(CLIENT_INFERENCE_CONTEXT_KEY, ctx) is not None:
        env = _envelope.current_envelope()
        if env is not None and trace.get_current_span(ctx) is env.span:
            outer = trace.get_current_span().get_span_context()
            if parent is not None and \
                    outer.trace_id == env.span.get_span_context().trace_id:
                parent = None
            else:
                parent = otel_context.set_value(CLIENT_INFERENCE_CONTEXT_KEY, None, ctx)
    return parent, _inference.light_mode(parent)


def _check() -> None:
    parent, current, data, env = _common._start_context()
    old_parent, old_mode = _old_parent_and_mode()
    assert parent == old_parent and (parent is None) == (old_parent is None)
    assert current is otel_context.get_current()
    # the envelope, read only under an inference (then the call's stages take it)
    assert env is _common.UNREAD or env is _envelope.current_envelope()
    assert _inference.light_mode_of(data) is old_mode or \
        _inference.light_mode_of(data) == old_mode is not None
    assert _common._parent_context() == old_parent


def test_the_start_context_reads_what_the_separate_reads_did() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("t")
    ctx = AgentContext(tracer_provider=provider)
    _check()  # nothing under way
    data = InferenceData()
    outer = tracer.start_span("chat outer")
    token = otel_context.attach(trace.set_span_in_context(
        outer, otel_context.set_value(CLIENT_INFERENCE_CONTEXT_KEY, data)))
    try:
        _check()  # the official instrumentor's inference outside ours
        with ctx.envelope(scope="turn"):
            _check()  # an envelope opened inside that inference: the call's own span
    finally:
        otel_context.detach(token)
    with ctx.envelope(scope="turn") as env:
        inner = otel_context.attach(otel_context.set_value(CLIENT_INFERENCE_CONTEXT_KEY, data))
        try:
            _check()  # an inference whose span is the envelope's
        finally:
            otel_context.detach(inner)
    run = ctx.envelope(scope="turn")
    run.__enter__()
    saved = otel_context.attach(otel_context.Context())  # a framework run's: not current
    reset = _envelope._RUN_ENVELOPE.set(run)
    try:
        _check()  # the run's envelope, no inference
        token = otel_context.attach(trace.set_span_in_context(
            outer, otel_context.set_value(CLIENT_INFERENCE_CONTEXT_KEY, data)))
        try:
            _check()  # the framework's inference in another trace than the run's
        finally:
            otel_context.detach(token)
        token = otel_context.attach(otel_context.set_value(
            CLIENT_INFERENCE_CONTEXT_KEY, data, trace.set_span_in_context(run.span)))
        try:
            _check()  # the framework's inference in the run's trace, its span current
        finally:
            otel_context.detach(token)
    finally:
        _envelope._RUN_ENVELOPE.reset(reset)
        otel_context.detach(saved)
        run.__exit__(None, None, None)
    assert env is not None
    outer.end()


@pytest.mark.parametrize("official", ["none", "outer"])
def test_an_envelope_left_inside_a_message_generator_is_not_the_calls(
        official: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # The call's start reads the current envelope; the application's generator in the
    # request, run after it, leaves that envelope: the call makes its own (as it does when
    # the start's read is not reused: ours alone, or the official instrumentor inside).
    import openai
    from llm_setup import make_setup
    from stub_server import StubServer

    def call(setup: Any) -> None:
        cm = setup.tel.agent_context.envelope(agent_name="app")
        cm.__enter__()
        left: list[int] = []

        def parts() -> Any:
            if not left:
                left.append(1)
                cm.__exit__(None, None, None)
            yield {"type": "text", "text": "q"}

        with StubServer() as stub:
            client = openai.OpenAI(base_url=stub.openai_base_url, api_key="k", max_retries=0)
            try:
                client.chat.completions.create(model="gpt-4o-mini", messages=[
                    {"role": "system", "content": "Be brief."},
                    {"role": "user", "content": parts()}])
            finally:
                if not left:
                    cm.__exit__(None, None, None)

    before = otel_context.get_current()
    for setup in make_setup(official, False, monkeypatch):
        # an envelope left while a later context is attached (the call's) comes back when
        # that one is detached: run in a copy, so nothing stays current for later tests
        contextvars.copy_context().run(call, setup)
        assert otel_context.get_current() is before
        chat = [s for s in setup.tel.spans() if s.name.startswith("chat ")]
        app = [s for s in setup.tel.spans() if s.name.startswith("invoke_agent")
               or (s.attributes or {}).get("context.scope") == "agent"]
        assert len(chat) == 1
        attributes = chat[0].attributes or {}
        # its own envelope: the scope and id on the chat span, not the ended one's
        assert "context.scope" in attributes
        assert all(attributes.get("context.id") != (s.attributes or {}).get("context.id")
                   for s in app if s is not chat[0])


def test_each_call_names_its_own_clients_server(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server's host and port are remembered for the last base URL (``_server``):
    calls through two clients in turn, and through one whose base URL the application
    changes, each name the server their request went to."""
    import openai
    from llm_setup import CAPTURE_ENV, Setup
    from stub_server import StubServer

    from otel_agent_context.testing import CapturedTelemetry

    monkeypatch.delenv(CAPTURE_ENV, raising=False)
    tel = CapturedTelemetry()
    setup = Setup(tel, "none", False)
    setup.start()
    expected: list[tuple[str, int]] = []
    try:
        with StubServer() as stub, StubServer() as other:
            clients = {
                ("127.0.0.1", stub.port): openai.OpenAI(
                    base_url=stub.openai_base_url, api_key="k", max_retries=0),
                ("localhost", other.port): openai.OpenAI(
                    base_url=f"http://localhost:{other.port}/v1", api_key="k",
                    max_retries=0)}
            for where, client in [*clients.items()] * 2:
                client.chat.completions.create(
                    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
                expected.append(where)
            moved = clients[("127.0.0.1", stub.port)]
            moved.base_url = f"http://localhost:{stub.port}/v1"  # the application moves it
            moved.chat.completions.create(
                model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}])
            expected.append(("localhost", stub.port))
    finally:
        setup.stop()
    assert [(s.attributes["server.address"], s.attributes["server.port"])
            for s in tel.spans()] == expected
