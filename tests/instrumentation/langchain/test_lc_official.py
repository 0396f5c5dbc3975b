"""Composed with the official GenAI LangChain instrumentor
(``opentelemetry-instrumentation-genai-langchain``) and the official OpenAI one, in either
wrapping order: a run is one trace (our envelope a child of the official run span), each
model call one span (the official chat span, carrying our records), and the bundles are the
ones ours alone records. Before, the envelope was the root of a trace of its own and every
model call was recorded twice, once in each trace."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.callbacks import AsyncCallbackHandler, BaseCallbackHandler
from langchain_core.callbacks.manager import AsyncCallbackManager
from langchain_core.language_models.fake import FakeListLLM
from langchain_core.messages import HumanMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda, RunnablePassthrough
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from lc_helpers import knowledge_base, strip_times
from opentelemetry import trace
from stub_server import REPLY, StubServer

from otel_agent_context import current_envelope
from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry

OFFICIAL_SCOPE = "opentelemetry.instrumentation.genai.langchain"


def _official() -> list[Any]:
    from opentelemetry.instrumentation.genai.langchain import LangChainInstrumentor
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    return [OpenAIInstrumentor(), LangChainInstrumentor()]


@contextmanager
def _instrumented(config: str) -> Iterator[CapturedTelemetry]:
    """Ours (LangChain and OpenAI) on fresh telemetry, with the official ones in ``config``:
    "alone", "ours outer" or "official outer" (the instrumentor wrapped last runs outermost)."""
    tel = CapturedTelemetry()
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider}
    ours = [(i, {**kw, "agent_context": tel.agent_context})
            for i in (OpenAIContextInstrumentor(), LangChainContextInstrumentor())]
    theirs = [(i, kw) for i in _official()] if config != "alone" else []
    order = ours + theirs if config == "official outer" else theirs + ours
    for inst, args in order:
        inst.instrument(**args)
    try:
        yield tel
    finally:
        for inst, _ in order:
            inst.uninstrument()
        tel.shutdown()


def _record(config: str, make: Callable[[str], Callable[[], Any]]
            ) -> tuple[list[Any], list[dict[str, Any]]]:
    """The spans and bundles of the scenario's two runs (a second run: nothing left over
    from the first)."""
    with _instrumented(config) as tel, StubServer() as stub:
        make(stub.openai_base_url)()
        return tel.spans(), [strip_times(b) for b in tel.bundles()]


def _retrieval_chain(base_url: str) -> Callable[[], Any]:
    retriever = knowledge_base().as_retriever(search_kwargs={"k": 2})
    prompt = ChatPromptTemplate.from_messages([
        ("system", "Answer from these notes:\n{context}"), ("human", "{question}")])
    chain = ({"context": retriever | (lambda docs: "\n".join(d.page_content for d in docs)),
              "question": RunnablePassthrough()} | prompt
             | ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-offline",
                          max_retries=0)
             | StrOutputParser())
    return lambda: [chain.invoke("How long do refunds take?") for _ in range(2)]


QUESTION = 'Where is order 42? [call:order_status {"order": 42}]'  # the stub calls the tool


def _support_agent(base_url: str) -> Any:
    @tool
    def order_status(order: int) -> str:
        """Where an order is."""
        return f"Order {order} shipped yesterday."

    return create_agent(
        model=ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-offline",
                         max_retries=0),
        tools=[order_status], system_prompt="You help customers.", name="support_agent")


def _agent(base_url: str) -> Callable[[], Any]:
    agent = _support_agent(base_url)
    return lambda: [agent.invoke({"messages": [HumanMessage(QUESTION)]}) for _ in range(2)]


def _agent_async(base_url: str) -> Callable[[], Any]:
    """The agent awaited: LangChain's async callback managers call the official handler
    after ours, so our envelope opens once both were called."""
    agent = _support_agent(base_url)

    async def twice() -> list[Any]:
        return [await agent.ainvoke({"messages": [HumanMessage(QUESTION)]}) for _ in range(2)]

    return lambda: asyncio.run(twice())


def _model_stream_async(base_url: str) -> Callable[[], Any]:
    """A model streamed on its own, awaited: the model run is the root (an implicit
    envelope), the stream goes through util-genai's invocation."""
    model = ChatOpenAI(model="gpt-4o-mini", base_url=base_url, api_key="sk-offline",
                       max_retries=0, streaming=True)

    async def once() -> str:
        return "".join([str(chunk.content) async for chunk in model.astream("Hello?")])

    async def twice() -> list[str]:
        return [await once() for _ in range(2)]

    return lambda: asyncio.run(twice())


@pytest.mark.parametrize("config", ["alone", "ours outer", "official outer"])
@pytest.mark.parametrize(("make", "calls"), [
    (_retrieval_chain, 1), (_agent, 2), (_agent_async, 2), (_model_stream_async, 1)],
    ids=["retrieval chain", "agent with a tool", "agent awaited", "model streamed, awaited"])
def test_one_trace_one_span_per_model_call_same_bundles(
        config: str, make: Callable[[str], Callable[[], Any]], calls: int) -> None:
    spans, bundles = _record(config, make)
    chats = [s for s in spans if s.name.startswith("chat ")]
    envelopes = [s for s in spans if s.name == "context.envelope"]
    assert len(envelopes) == 2
    assert len(chats) == 2 * calls  # one span a model call, composed or not
    by_id = {s.context.span_id: s for s in spans}
    for env in envelopes:
        in_trace = [s for s in spans if s.context.trace_id == env.context.trace_id]
        mine = [s for s in chats if s.attributes.get("context.id") == env.attributes["context.id"]]
        assert len(mine) == calls and all(s in in_trace for s in mine)
        if config == "alone":
            assert env.parent is None
            assert all(by_id[s.parent.span_id] is env for s in mine)
            continue
        # the official run span is the trace's root, our envelope its child
        (root,) = [s for s in in_trace if s.parent is None]
        assert root.instrumentation_scope.name == OFFICIAL_SCOPE
        assert env.parent.span_id == root.context.span_id
        # each call is the official chat span, carrying our records; none of ours beside it
        assert all(s.instrumentation_scope.name == OFFICIAL_SCOPE for s in mine)
    # the spans rebuild complete bundles, the same as ours alone records
    assert [b["rebuild"]["status"] for b in bundles] == ["complete", "complete"]
    assert bundles[0]["rebuild"]["expected_spans"] == bundles[0]["rebuild"]["received_spans"]
    if config != "alone":
        _, alone = _record("alone", make)
        assert _without_run_ids(bundles) == _without_run_ids(alone)


def _without_run_ids(bundles: list[dict[str, Any]]) -> Any:
    """Bundles with what differs from run to run left out (trace and span ids, our record
    ids, LangChain's message and run ids, and the hashes over them): what was recorded."""
    text = json.dumps(bundles, sort_keys=True)
    text = re.sub(r'"hash": "[^"]*"', '"hash": "<hash>"', text)
    text = re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "<uuid>",
                  text)
    text = re.sub(r"\b[0-9a-f]{32}\b|\b[0-9a-f]{16}\b", "<id>", text)
    text = re.sub(r"\b(call|ctx|asm|bud|inj|chatcmpl)_[A-Za-z0-9]+", r"\1_<n>", text)
    return json.loads(text)


@pytest.mark.parametrize("config", ["ours outer", "official outer"])
def test_the_reply_is_unchanged(config: str) -> None:
    with _instrumented(config), StubServer() as stub:
        assert _retrieval_chain(stub.openai_base_url)() == [REPLY, REPLY]


# -- edges found in review: nothing left open or current, one span a call ------------------


def _chain(base_url: str) -> Any:
    return RunnableLambda(lambda x: x) | ChatOpenAI(
        model="gpt-4o-mini", base_url=base_url, api_key="sk-offline", max_retries=0)


def _no_envelope_left() -> None:
    env = current_envelope()
    assert env is None, "an envelope is still current after the run"
    assert not trace.get_current_span().get_span_context().is_valid


class _Guard(AsyncCallbackHandler):
    """A guardrail that refuses some inputs by raising in the start callback
    (``raise_error``): LangChain then reports no end for the run."""

    raise_error = True

    async def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        if "forbidden" in str(inputs):
            raise PermissionError("blocked by guardrail")


@pytest.mark.parametrize("config", ["alone", "ours outer", "official outer"])
def test_a_start_refused_by_another_handler_leaves_nothing_open(config: str) -> None:
    with _instrumented(config) as tel, StubServer() as stub:
        chain = _chain(stub.openai_base_url)

        async def main() -> None:
            with pytest.raises(PermissionError):
                await chain.ainvoke([HumanMessage("forbidden")], config={"callbacks": [_Guard()]})
            _no_envelope_left()
            await chain.ainvoke([HumanMessage("hello")], config={"callbacks": [_Guard()]})
            _no_envelope_left()

        asyncio.run(main())
        spans = tel.spans()
    envelopes = [s for s in spans if s.name == "context.envelope"]
    chats = [s for s in spans if s.name.startswith("chat ")]
    # the refused run: no envelope (it would never end); the next: its own, one call
    assert len(envelopes) == 1 and len(chats) == 1
    assert chats[0].attributes["context.id"] == envelopes[0].attributes["context.id"]
    assert chats[0].context.trace_id == envelopes[0].context.trace_id


class _Moderation(BaseCallbackHandler):
    """A handler (not inline: LangChain runs it in an executor's copy of the context) that
    runs a model of its own when the top-level run starts."""

    def __init__(self) -> None:
        self.llm = FakeListLLM(responses=["ok"] * 4)

    def on_chain_start(self, serialized: Any, inputs: Any, *, parent_run_id: Any = None,
                       **kwargs: Any) -> None:
        if parent_run_id is None:
            self.llm.invoke("is this fine?", config={"callbacks": []})


@pytest.mark.parametrize("config", ["alone", "ours outer", "official outer"])
def test_a_run_inside_another_handler_during_the_start_is_its_own(config: str) -> None:
    with _instrumented(config) as tel, StubServer() as stub:
        chain = _chain(stub.openai_base_url)

        async def main() -> None:
            await chain.ainvoke([HumanMessage("hi")], config={"callbacks": [_Moderation()]})
            _no_envelope_left()

        asyncio.run(main())
        spans = tel.spans()
        bundles = tel.bundles()
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(chats) == 1  # the stub's call, once
    assert sorted(len(b.get("context_assemblies", [])) for b in bundles) == [0, 1]
    assert all(b["rebuild"]["status"] == "complete" for b in bundles)


@pytest.mark.parametrize("config", ["alone", "ours outer", "official outer"])
def test_a_batch_gives_each_run_its_envelope(config: str) -> None:
    """A batch starts every run in the caller's context before running any: each run still
    gets its own envelope, and its model call lands in it."""
    with _instrumented(config) as tel, StubServer() as stub:
        prompt = ChatPromptTemplate.from_messages([("human", "{question}")])
        chain = prompt | ChatOpenAI(model="gpt-4o-mini", base_url=stub.openai_base_url,
                                    api_key="sk-offline", max_retries=0)
        chain.batch([{"question": "first?"}, {"question": "second?"}])
        _no_envelope_left()
        spans = tel.spans()
    envelopes = [s for s in spans if s.name == "context.envelope"]
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(envelopes) == 2 and len(chats) == 2
    for env in envelopes:
        (mine,) = [s for s in chats if s.attributes["context.id"] == env.attributes["context.id"]]
        assert mine.context.trace_id == env.context.trace_id


def test_an_async_envelope_starts_no_earlier_than_the_official_run_span() -> None:
    with _instrumented("ours outer") as tel, StubServer() as stub:
        asyncio.run(_chain(stub.openai_base_url).ainvoke([HumanMessage("hi")]))
        spans = tel.spans()
    by_id = {s.context.span_id: s for s in spans}
    (env,) = [s for s in spans if s.name == "context.envelope"]
    parent = by_id[env.parent.span_id]
    assert parent.instrumentation_scope.name == OFFICIAL_SCOPE
    assert env.start_time >= parent.start_time


def test_uninstrumenting_ours_leaves_the_official_instrumentor_whole() -> None:
    """The official instrumentor wraps the async managers' start methods too: taking ours
    off (either order) never takes its wrapper off, and ours on again composes as before."""
    tel = CapturedTelemetry()
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider}
    official = _official()
    ours = [OpenAIContextInstrumentor(), LangChainContextInstrumentor()]
    method = "on_chain_start"
    try:
        for inst in ours:
            inst.instrument(**kw, agent_context=tel.agent_context)
        for inst in official:
            inst.instrument(**kw)  # wrapped last: outermost
        official_layer = vars(AsyncCallbackManager)[method]
        for inst in ours:
            inst.uninstrument()
        assert vars(AsyncCallbackManager)[method] is official_layer  # still there
        for inst in ours:
            inst.instrument(**kw, agent_context=tel.agent_context)
        with StubServer() as stub:
            asyncio.run(_chain(stub.openai_base_url).ainvoke([HumanMessage("hi")]))
        spans = tel.spans()
        assert len({s.context.trace_id for s in spans}) == 1
        assert len([s for s in spans if s.name.startswith("chat ")]) == 1
    finally:
        for inst in ours + official:
            inst.uninstrument()
        tel.shutdown()


@pytest.mark.parametrize("app_span", [False, True], ids=["no_app_span", "app_span"])
def test_with_only_the_official_openai_instrumentor_outside_ours(app_span: bool) -> None:
    """No official LangChain instrumentor; the official OpenAI one wrapped outside ours. With
    a span of the application's around the run, the envelope and the official call span are
    in one trace: the call joins it (one span); without, they are two traces and the call
    keeps its own span under the envelope beside the official one."""
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    tel = CapturedTelemetry()
    kw = {"tracer_provider": tel.tracer_provider, "meter_provider": tel.meter_provider}
    ours = [OpenAIContextInstrumentor(), LangChainContextInstrumentor()]
    official = OpenAIInstrumentor()
    try:
        for inst in ours:
            inst.instrument(**kw, agent_context=tel.agent_context)
        official.instrument(**kw)
        with StubServer() as stub:
            chain = ChatPromptTemplate.from_messages([("human", "{q}")]) | ChatOpenAI(
                model="gpt-4o-mini", base_url=stub.openai_base_url, api_key="sk-offline",
                max_retries=0)
            if app_span:
                with tel.tracer_provider.get_tracer("app").start_as_current_span("request"):
                    chain.invoke({"q": "hi"})
            else:
                chain.invoke({"q": "hi"})
        spans = tel.spans()
        (bundle,) = tel.bundles()
    finally:
        official.uninstrument()
        for inst in ours:
            inst.uninstrument()
        tel.shutdown()
    chats = [s for s in spans if s.name.startswith("chat ")]
    (env,) = [s for s in spans if s.name == "context.envelope"]
    assert bundle["rebuild"]["status"] == "complete"
    assert len(bundle["context_assemblies"]) == 1
    mine = [s for s in chats if s.attributes.get("context.id") == env.attributes["context.id"]]
    assert len(mine) == 1 and mine[0].context.trace_id == env.context.trace_id
    assert len(chats) == (1 if app_span else 2)


class _SyncGuard(BaseCallbackHandler):
    """The same guardrail as a sync handler, on a sync run."""

    raise_error = True

    def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
        if "forbidden" in str(inputs):
            raise PermissionError("blocked by guardrail")


@pytest.mark.parametrize("config", ["alone", "ours outer", "official outer"])
def test_a_sync_start_refused_by_another_handler_leaves_nothing_open(config: str) -> None:
    """The guard registered as LangChain registers ours (a configure hook), after ours: the
    sync manager calls our handler first, then the guard refuses the run."""
    import contextvars

    from langchain_core.tracers import context as hooks

    with _instrumented(config) as tel, StubServer() as stub:
        guard: contextvars.ContextVar[Any] = contextvars.ContextVar("test_guard", default=None)
        token = guard.set(_SyncGuard())
        hooks.register_configure_hook(guard, True)
        guard_hook = hooks._configure_hooks[-1]
        try:
            chain = _chain(stub.openai_base_url)
            with pytest.raises(PermissionError):
                chain.invoke([HumanMessage("forbidden")])
            _no_envelope_left()
            chain.invoke([HumanMessage("hello")])
            _no_envelope_left()
        finally:
            hooks._configure_hooks.remove(guard_hook)
            guard.reset(token)
        spans = tel.spans()
    envelopes = [s for s in spans if s.name == "context.envelope"]
    chats = [s for s in spans if s.name.startswith("chat ")]
    assert len(envelopes) == 1 and len(chats) == 1
    assert chats[0].attributes["context.id"] == envelopes[0].attributes["context.id"]
    assert chats[0].context.trace_id == envelopes[0].context.trace_id
