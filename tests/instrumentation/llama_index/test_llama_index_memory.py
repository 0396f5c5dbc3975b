"""LlamaIndex's ``Memory`` (the default memory of its chat engines in ``llama-index-core``
0.14), real, with its default SQLite chat store, behind a context chat engine answering through
the ``openai`` client on the loopback stub (``li_app.memory_engine``): its token-limit flushes
as budgets with truncations (dropped) or as a compaction into a memory block, the blocks' cut
by priority, and one id per message shared by the truncation records and the prompt's blocks;
and agents (``li_agent_app``): a ``FunctionAgent`` and a ``ReActAgent`` over a ``Memory``,
their runs as turns; an ``AgentWorkflow``'s handoff as an envelope of scope ``handoff``.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
from collections.abc import Iterator
from typing import Any

import li_agent_app
import li_app
import pytest
from framework_helpers import framework_on
from stub_server import REPLY, StubServer

from otel_agent_context._attributes import digest_text
from otel_agent_context._digest import short_digest
from otel_agent_context.instrumentation._tokens import estimate_tokens
from otel_agent_context.instrumentation.llama_index import LlamaIndexContextInstrumentor
from otel_agent_context.instrumentation.llama_index._items import text_message_id
from otel_agent_context.testing import CapturedTelemetry

Q1, Q2, Q3 = li_app.QUESTIONS
QUEUE_LIMIT = 21  # 70% of the memory's 30 words
#: The first exchange, flushed when the second question is put: 6 + 11 words.
FIRST = [(text_message_id("user", Q1), 6), (text_message_id("assistant", REPLY), 11)]
ORDER_TEXT = "Where is my order?"


@pytest.fixture
def li_on(capture_setup: Any) -> Iterator[CapturedTelemetry]:
    with framework_on(LlamaIndexContextInstrumentor(), capture_setup) as tel:
        yield tel


def _run(notes: bool) -> tuple[list[str], list[Any]]:
    with StubServer() as stub:
        out = li_app.memory_chat(stub.openai_base_url, notes)
        return out, stub.requests


def _exported(tel: CapturedTelemetry) -> str:
    return json.dumps([[dict(s.attributes), [dict(e.attributes) for e in s.events]]
                       for s in tel.spans()], default=str)


def _budgets(bundle: dict[str, Any], max_tokens: int) -> list[dict[str, Any]]:
    return [b for b in bundle["context_budgets"] if b["max_tokens"] == max_tokens]


def _blocks(bundle: dict[str, Any]) -> list[tuple[str, str]]:
    (assembly,) = bundle["context_assemblies"]
    return [(b["item_id"], b["context_kind"]) for b in assembly["ordered_blocks"]]


def _records(budget: dict[str, Any]) -> list[tuple[str, int, int, str]]:
    return [(r["item_id"], r["tokens_before"], r["tokens_after"], r["strategy"])
            for r in budget.get("truncation_records", ())]


def test_a_flush_with_no_memory_block_is_a_truncation_naming_the_prompts_messages(
        capture_setup: Any) -> None:
    plain, plain_requests = _run(notes=False)
    capture_setup.tel.span_exporter.clear()
    with framework_on(LlamaIndexContextInstrumentor(), capture_setup) as tel:
        out, requests = _run(notes=False)
    assert out == plain == [REPLY] * 3
    assert json.dumps(requests) == json.dumps(plain_requests)  # the same bodies

    first, second, third = bundles = tel.bundles()
    assert [b["context_envelope"]["scope"] for b in bundles] == ["turn"] * 3
    # every turn: the memory's get, a budget of its whole limit, nothing cut
    gets = [_budgets(b, li_app.MEMORY_LIMIT) for b in bundles]
    assert [[(g["actual_items"], g["actual_tokens"], g["overflow"]) for g in got]
            for got in gets] == [[(0, 0, False)], [(2, 17, False)], [(2, 17, False)]]
    assert all(g["overflow_strategy"] == "truncate_middle" for got in gets for g in got)
    # the second question overflows the queue: the first exchange is dropped, in turn 2
    assert _budgets(first, QUEUE_LIMIT) == []
    (flush,) = _budgets(second, QUEUE_LIMIT)
    assert _records(flush) == [(i, n, 0, "truncate_middle") for i, n in FIRST]
    assert (flush["overflow"], flush["overflow_tokens"]) == (True, 6 + 17 - QUEUE_LIMIT)
    assert (flush["actual_items"], flush["actual_tokens"]) == (1, 6)  # the question kept
    assert "context_compactions" not in second  # dropped, not kept anywhere
    # one id per message: the blocks that carried the first exchange name it alike
    assert _blocks(first)[-1] == (FIRST[0][0], "user_message")
    assert _blocks(second)[1:] == [(FIRST[0][0], "session_history"),
                                   (FIRST[1][0], "session_history"),
                                   (text_message_id("user", Q2), "user_message")]
    assert _blocks(third)[1:] == [(text_message_id("user", Q2), "session_history"),
                                  (FIRST[1][0], "session_history"),
                                  (text_message_id("user", Q3), "user_message")]
    (again,) = _budgets(third, QUEUE_LIMIT)  # the second exchange goes in turn 3
    assert [r[0] for r in _records(again)] == [text_message_id("user", Q2), FIRST[1][0]]
    assert (Q1 in _exported(tel)) is capture_setup.capture


def test_a_flush_into_a_memory_block_is_a_compaction_and_its_cut_by_priority_a_truncation(
        li_on: CapturedTelemetry) -> None:
    tel = li_on
    out, _ = _run(notes=True)
    assert out == [REPLY] * 3
    first, second, third = tel.bundles()
    (flush,) = _budgets(second, QUEUE_LIMIT)
    assert _records(flush) == [(i, n, 0, "summarize_oldest") for i, n in FIRST]
    (compaction,) = second["context_compactions"]
    assert (compaction["method"], compaction["trigger"], compaction["replacement_policy"]) == (
        "semantic_memory_update", "token_limit", "memory blocks: notes (Notes)")
    assert compaction["source_item_refs"] == [i for i, _ in FIRST]
    assert (compaction["source_count"], compaction["tokens_before"],
            compaction["coverage"]) == (2, 17, 1.0)
    # turn 3: 17 words of history and the block's 17 exceed 30: the block loses 4 words
    (get,) = _budgets(third, li_app.MEMORY_LIMIT)
    assert _records(get) == [("llama_index_memory_block:notes", 17, 13, "custom")]
    assert (get["overflow"], get["overflow_tokens"], get["overflow_strategy"]) == (
        True, 4, "custom")
    assert (get["actual_tokens"], get["actual_items"]) == (30, 3)  # memory, question, reply
    # the memory's message (the block's words) goes into the prompt after the system prompt,
    # and names the block it carries (the block's text: a surface item of the turn)
    assert [k for _, k in _blocks(third)] == ["system_prompt", "system_prompt",
                                              "session_history", "session_history",
                                              "user_message"]
    (assembly,) = third["context_assemblies"]
    assert assembly["ordered_blocks"][1]["source_item_refs"] == [
        "llama_index_memory_block:notes"]
    notes = next(i for i in third["context_items"]
                 if i["item_id"] == "llama_index_memory_block:notes")
    assert (notes["context_kind"], notes["token_estimate"]) == ("durable_memory", 13)
    assert ("the phone? The order shipped" in _exported(tel)) is tel.agent_context.capture_content
    assert not any(i["item_id"].startswith("llama_index_memory_block:")
                   for b in (first, second) for i in b.get("context_items", ()))
    assert "context_compactions" not in first
    (later,) = third["context_compactions"]  # the second exchange goes to the block in turn 3
    assert later["source_item_refs"] == [text_message_id("user", Q2), FIRST[1][0]]


def test_async_chat_records_the_flush_in_its_turn(li_on: CapturedTelemetry) -> None:
    tel = li_on

    async def chat(engine: Any) -> list[str]:
        return [str(await engine.achat(q)) for q in li_app.QUESTIONS]

    with StubServer() as stub:
        out = asyncio.run(chat(li_app.memory_engine(stub.openai_base_url, notes=False)))
    assert out == [REPLY] * 3
    bundles = tel.bundles()
    assert len(bundles) == 3  # no implicit envelope: the memory's records are the turn's
    (flush,) = _budgets(bundles[1], QUEUE_LIMIT)
    assert _records(flush) == [(i, n, 0, "truncate_middle") for i, n in FIRST]
    assert _blocks(bundles[1])[1:3] == [(FIRST[0][0], "session_history"),
                                        (FIRST[1][0], "session_history")]


def test_memory_used_on_its_own_gets_an_implicit_envelope_and_uninstrument_stops_it(
        li_on: CapturedTelemetry) -> None:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.memory import Memory

    tel = li_on
    memory = Memory.from_defaults(token_limit=10, token_flush_size=3,
                                  tokenizer_fn=lambda text: text.split())
    memory.put(ChatMessage(role="user", content="one two three four"))
    memory.put(ChatMessage(role="assistant", content="five six seven eight"))
    assert tel.bundles() == []  # under the limit: nothing to record
    memory.put(ChatMessage(role="user", content="nine ten"))
    (bundle,) = tel.bundles()
    (flush,) = bundle["context_budgets"]
    assert (flush["max_tokens"], _records(flush)) == (7, [
        (text_message_id("user", "one two three four"), 4, 0, "truncate_middle"),
        (text_message_id("assistant", "five six seven eight"), 4, 0, "truncate_middle")])
    assert [m.content for m in memory.get()] == ["nine ten"]
    LlamaIndexContextInstrumentor().uninstrument()
    tel.span_exporter.clear()
    memory.put(ChatMessage(role="user", content="a b c d"))
    memory.put(ChatMessage(role="assistant", content="e f g h"))  # flushes "nine ten"
    assert [m.content for m in memory.get()] == ["a b c d", "e f g h"]
    assert tel.spans() == []


def _plain_and_instrumented(setup: Any, run: Any) -> tuple[Any, list[Any], CapturedTelemetry]:
    """``run()`` (its output and the stub's requests) before and while LlamaIndex is
    instrumented: the same output and request bodies both times."""
    plain, plain_requests = run()
    setup.tel.span_exporter.clear()
    with framework_on(LlamaIndexContextInstrumentor(), setup) as tel:
        out, requests = run()
    assert out == plain
    assert json.dumps(requests) == json.dumps(plain_requests)
    return out, requests, tel


def _agent_run() -> tuple[list[str], list[Any]]:
    with StubServer() as stub:
        out = asyncio.run(li_agent_app.run(stub.openai_base_url))
        return out, stub.requests


def test_a_function_agents_runs_are_turns_holding_their_model_calls(
        capture_setup: Any) -> None:
    """``FunctionAgent.run`` (a workflow run): one envelope per run with the agent's name;
    the run's model calls (the tool call and the answer after the tool) join it; its memory's
    messages keep one id across the runs' prompts."""
    out, requests, tel = _plain_and_instrumented(capture_setup, _agent_run)
    assert out == [REPLY, REPLY]
    assert len(requests) == 3  # the tool call, the answer after it, the follow-up's answer

    first, second = tel.bundles()
    for bundle in (first, second):
        envelope = bundle["context_envelope"]
        assert (envelope["scope"], envelope["metadata"]["gen_ai.agent.name"]) == (
            "turn", "Order agent")
        assert bundle["rebuild"]["status"] == "complete"
    assert [len(b["context_assemblies"]) for b in (first, second)] == [2, 1]
    asked = text_message_id("user", li_agent_app.FIRST)
    call, after = ([(x["item_id"], x["context_kind"]) for x in a["ordered_blocks"]]
                   for a in first["context_assemblies"])
    assert call[1:] == [(asked, "user_message")]
    assert after[1] == (asked, "user_message") and after[-1][1] == "tool_result"
    (follow_up,) = second["context_assemblies"]
    blocks = [(x["item_id"], x["context_kind"]) for x in follow_up["ordered_blocks"]]
    assert blocks[1] == (asked, "session_history")  # the first run's question, same id
    assert blocks[-2:] == [(text_message_id("assistant", REPLY), "session_history"),
                           (text_message_id("user", li_agent_app.SECOND), "user_message")]
    # the memory (LlamaIndex's Memory) read before each model call: its budget in the run
    assert [b["max_tokens"] for b in first["context_budgets"]].count(4000) >= 2
    assert (ORDER_TEXT in _exported(tel)) is capture_setup.capture


def _workflow(handoff: str) -> tuple[str, list[Any]]:
    with StubServer() as stub:
        out = asyncio.run(li_agent_app.run_workflow(stub.openai_base_url, handoff))
        return out, stub.requests


def _ids(assembly: dict[str, Any]) -> list[tuple[str, str]]:
    return [(b["item_id"], b["context_kind"]) for b in assembly["ordered_blocks"]]


def test_an_agent_workflow_handoff_is_a_handoff_envelope_holding_the_next_agents_calls(
        capture_setup: Any) -> None:
    """``AgentWorkflow.run`` with a handoff: the run's envelope (the triage agent's, holding
    its call), and the handoff's (scope ``handoff``, the agent handed to, linked to the run's)
    with what went across and the order agent's model call."""
    out, requests, tel = _plain_and_instrumented(
        capture_setup, lambda: _workflow(li_agent_app.HANDOFF))
    assert out == REPLY
    assert len(requests) == 2  # the triage agent's handoff call, the order agent's answer

    turn, handoff = tel.bundles()
    asked = text_message_id("user", li_agent_app.HANDOFF)
    envelope = turn["context_envelope"]
    assert (envelope["scope"], envelope["metadata"], "parent_id" in envelope) == (
        "turn", {"gen_ai.agent.name": "Triage agent"}, False)
    (triage,) = turn["context_assemblies"]  # the triage agent's call only
    assert _ids(triage)[1:] == [(asked, "user_message")]
    assert "context_selections" not in turn

    sent = handoff["context_envelope"]
    assert (sent["scope"], sent["parent_id"], sent["metadata"], sent["actor_refs"]) == (
        "handoff", envelope["context_id"], {"gen_ai.agent.name": "Order agent"},
        ["agent:Triage agent", "agent:Order agent"])
    assert handoff["rebuild"]["status"] == turn["rebuild"]["status"] == "complete"
    # in the run's trace, its span a child of the run's envelope span
    spans = {s.attributes.get("context.id"): s for s in tel.spans()
             if s.name == "context.envelope"}
    child, parent = spans[sent["context_id"]], spans[envelope["context_id"]]
    assert child.parent is not None and child.parent.span_id == parent.context.span_id
    assert child.start_time < spans[envelope["context_id"]].end_time
    (order,) = handoff["context_assemblies"]  # the order agent's call: attributed to it
    (call,) = [r for r in sent["telemetry_refs"] if r["span_name"].startswith("chat ")]
    assert call["trace_id"] == envelope["telemetry_refs"][0]["trace_id"]
    blocks = _ids(order)
    assert [k for _, k in blocks] == ["system_prompt", "user_message", "session_history",
                                      "tool_result"]
    (selection,) = handoff["context_selections"]
    assert (selection["intent"], selection["selection_policy"]) == ("handoff", "handoff")
    reason = "llama_index_handoff:" + short_digest("Triage agent", "Order agent",
                                                    li_agent_app.REASON, length=16)
    # the reason, then the memory's messages that went across, named as the prompt names them
    assert selection["selected_item_refs"] == [reason] + [i for i, _ in blocks[1:]]
    assert [r["rank"] for r in selection["ranking_signals"]] == [1, 2, 3, 4]
    assert "omitted_item_refs" not in selection
    items = {i["item_id"]: i for i in handoff["context_items"]}
    why = items[reason]
    assert (why["context_kind"], why["token_estimate"], why["digest"]) == (
        "peer_agent_message", estimate_tokens(li_agent_app.REASON),
        digest_text(li_agent_app.REASON))
    capture = capture_setup.capture
    assert ("content" in why, "rationale" in selection) == (capture, capture)
    if capture:
        assert why["content"] == selection["rationale"] == li_agent_app.REASON
    assert (li_agent_app.REASON in _exported(tel)) is capture


def test_a_tool_called_twice_alike_before_a_handoff_is_two_items(
        capture_setup: Any) -> None:
    """The conversation before a handoff called the same tool with the same arguments twice
    (two calls, two results): the handoff's selection names the two call messages as the
    order agent's prompt names its blocks (the second ``#2``), and its bundle holds no two
    items under one id."""
    from llama_index.core.llms import ChatMessage

    def called(call_id: str) -> list[Any]:
        return [ChatMessage(role="assistant", content="", additional_kwargs={"tool_calls": [
                    {"id": call_id, "type": "function", "function": {
                        "name": "order_status", "arguments": '{"order_id": "A-1042"}'}}]}),
                ChatMessage(role="tool", content="Shipped.",
                            additional_kwargs={"tool_call_id": call_id,
                                               "name": "order_status"})]

    history = [ChatMessage(role="user", content="Is it shipped?"), *called("call_a"),
               *called("call_b")]

    def run() -> tuple[str, list[Any]]:
        with StubServer() as stub:
            out = asyncio.run(li_agent_app.run_workflow(
                stub.openai_base_url, li_agent_app.HANDOFF, chat_history=list(history)))
            return out, stub.requests

    out, _, tel = _plain_and_instrumented(capture_setup, run)
    assert out == REPLY
    handoff = next(b for b in tel.bundles() if b["context_envelope"]["scope"] == "handoff")
    (order,) = handoff["context_assemblies"]
    blocks = [i for i, _ in _ids(order)[1:]]
    (second,) = [b for b in blocks if "#" in b]  # the second call message, numbered
    assert second.endswith("#2") and second.removesuffix("#2") in blocks
    (selection,) = handoff["context_selections"]
    assert selection["selected_item_refs"][1:] == blocks
    ids = [i["item_id"] for i in handoff["context_items"]]
    assert len(ids) == len(set(ids))
    assert handoff["rebuild"]["status"] == "complete"


def test_a_refused_handoff_is_no_handoff(li_on: CapturedTelemetry) -> None:
    """A handoff to an agent the workflow does not have: LlamaIndex's tool refuses it, the
    same agent goes on: one turn, both calls in it, no handoff envelope."""
    tel = li_on
    out, requests = _workflow(li_agent_app.HANDOFF.replace("Order agent", "Billing agent"))
    assert out == REPLY and len(requests) == 2
    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["metadata"]["gen_ai.agent.name"] == "Triage agent"
    assert "context_selections" not in bundle
    first, second = bundle["context_assemblies"]
    assert [k for _, k in _ids(second)][-1] == "tool_result"


def _handed_over(bundle: dict[str, Any]) -> dict[str, Any]:
    """What a handoff's bundle says, without its ids and times: the agents, what went
    across (ids, kinds, ranks, digests, token estimates) and the receiving agent's prompt."""
    envelope = bundle["context_envelope"]
    (selection,) = bundle["context_selections"]
    items = {i["item_id"]: i for i in bundle["context_items"]}
    return {
        "envelope": (envelope["scope"], envelope["metadata"], envelope["actor_refs"],
                     envelope["lifecycle"]),
        "selection": (selection["intent"], selection["selection_policy"],
                      selection.get("rationale"), [r["rank"] for r in
                                                   selection["ranking_signals"]]),
        "selected": [(i, items[i]["context_kind"], items[i]["digest"],
                      items[i]["token_estimate"], items[i].get("content"))
                     for i in selection["selected_item_refs"]],
        "omitted": selection.get("omitted_item_refs"),
        "prompts": [_ids(a) for a in bundle.get("context_assemblies", [])],
        "budgets": [b["max_tokens"] for b in bundle.get("context_budgets", [])],
    }


def test_a_handoff_inside_the_applications_envelope_is_its_child_handoff_envelope(
        capture_setup: Any) -> None:
    """The workflow run inside the application's own envelope (``with ctx.envelope``): the
    run joins it (no envelope of ours for the run), and the handoff is an envelope of scope
    ``handoff``, a child of the app's, holding what went across and the order agent's model
    call: the same handoff as when our layer opens the run's envelope. Each model call is in
    one envelope; the app's envelope keeps its attributes, stays current after the run (the
    app records on in it) and ends when the app's block does."""
    tel_ctx = capture_setup.tel.agent_context

    def run() -> tuple[tuple[str, bool], list[Any]]:
        with StubServer() as stub:
            out = asyncio.run(li_agent_app.run_workflow_in_envelope(stub.openai_base_url,
                                                                    tel_ctx))
            return out, stub.requests

    out, requests, tel = _plain_and_instrumented(capture_setup, run)
    assert out == (REPLY, True)  # the app's envelope still current after the run
    assert len(requests) == 2  # the triage agent's handoff call, the order agent's answer
    app, handoff = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["created_at"])

    envelope = app["context_envelope"]  # the app's, as the app made it
    assert (envelope["scope"], envelope["metadata"], "parent_id" in envelope) == (
        "turn", {"gen_ai.agent.name": "Support desk",
                 "gen_ai.conversation.id": li_agent_app.SESSION}, False)
    assert envelope["lifecycle"] == "injected"  # from its stages, as the app ended it
    (triage,) = app["context_assemblies"]  # the triage agent's call only
    asked = text_message_id("user", li_agent_app.HANDOFF)
    assert _ids(triage)[1:] == [(asked, "user_message")]
    assert "context_selections" not in app
    # what the app recorded after the run landed in its own envelope
    assert [m["needed_for"] for m in app["missing_context"]] == ["delivery_date"]

    sent = handoff["context_envelope"]
    assert (sent["scope"], sent["parent_id"], sent["metadata"]["gen_ai.agent.name"]) == (
        "handoff", envelope["context_id"], "Order agent")
    # part of the app's conversation: the store's session view lists it with the app's turns
    assert sent["metadata"]["gen_ai.conversation.id"] == li_agent_app.SESSION
    assert all(b["rebuild"]["status"] == "complete" for b in (app, handoff))

    spans = tel.spans()
    envelopes = {s.attributes["context.id"]: s for s in spans if s.name == "context.envelope"}
    assert set(envelopes) == {envelope["context_id"], sent["context_id"]}  # none of ours
    outer, child = envelopes[envelope["context_id"]], envelopes[sent["context_id"]]
    assert child.parent is not None and child.parent.span_id == outer.context.span_id
    assert outer.start_time < child.start_time and child.end_time <= outer.end_time
    # each model call in one envelope: the triage agent's in the app's, the order agent's
    # in the handoff's, its span under the handoff's envelope span
    calls = sorted((s for s in spans if s.name.startswith("chat ")),
                   key=lambda s: s.start_time)
    assert [c.attributes["context.id"] for c in calls] == [envelope["context_id"],
                                                            sent["context_id"]]
    assert calls[0].parent.span_id == outer.context.span_id
    assert calls[1].parent.span_id == child.context.span_id
    assert {c.context.trace_id for c in calls} == {outer.context.trace_id}

    # the same handoff as when our layer opens the run's envelope
    tel.span_exporter.clear()
    with framework_on(LlamaIndexContextInstrumentor(), capture_setup):
        _workflow(li_agent_app.HANDOFF)
    _, ours = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["created_at"])
    del handoff["context_envelope"]["metadata"]["gen_ai.conversation.id"]  # ours names none
    assert _handed_over(handoff) == _handed_over(ours)
    shape = _handed_over(handoff)
    assert [k for _, k in shape["prompts"][0]] == ["system_prompt", "user_message",
                                                    "session_history", "tool_result"]
    assert [i for i, *_ in shape["selected"]][1:] == [i for i, _ in shape["prompts"][0][1:]]
    assert len(shape["budgets"]) == 1  # the order agent's memory read, in its envelope
    assert (li_agent_app.REASON in _exported(tel)) is capture_setup.capture


def test_a_function_agent_and_a_chat_engine_inside_the_applications_envelope_join_it(
        li_on: CapturedTelemetry) -> None:
    """A ``FunctionAgent``'s two runs and a context chat engine's three turns inside one
    envelope of the app's: no envelope of ours, every model call, memory budget and
    retrieval in the app's envelope, its attributes as the app set them."""
    tel = li_on
    with StubServer() as stub:
        async def app() -> tuple[list[str], list[str]]:
            with tel.agent_context.envelope(scope="session", agent_name="Support desk",
                                            conversation_id=li_agent_app.SESSION):
                runs = await li_agent_app.run(stub.openai_base_url)
                turns = await asyncio.to_thread(li_app.chat, stub.openai_base_url)
                return runs, turns

        runs, turns = asyncio.run(app())
        requests = len(stub.requests)
    assert runs == [REPLY] * 2 and turns == [REPLY] * 3 and requests == 6
    (bundle,) = tel.bundles()
    envelope = bundle["context_envelope"]
    assert (envelope["scope"], envelope["metadata"]) == (
        "session", {"gen_ai.agent.name": "Support desk",
                    "gen_ai.conversation.id": li_agent_app.SESSION})
    assert len(bundle["context_assemblies"]) == requests  # each call once, all in it
    assert [s["intent"] for s in bundle["context_selections"]] == ["retrieval"] * 3
    # the agent's Memory and the chat engine's buffer, read before each call
    assert {4000, li_app.TOKEN_LIMIT} <= {b["max_tokens"] for b in bundle["context_budgets"]}
    assert [s.name for s in tel.spans()].count("context.envelope") == 1
    assert bundle["rebuild"]["status"] == "complete"


def test_an_agent_used_as_a_tool_runs_in_a_child_envelope_inside_and_outside_the_apps(
        capture_setup: Any) -> None:
    """A ``FunctionAgent`` whose tool runs another agent: the inner run is an envelope of its
    own (scope ``tool_invocation``, the tool call named), a child of the outer run's, holding
    the inner agent's model call; the outer agent's two calls stay in the outer envelope.
    The same when the outer run joined the application's envelope: the child is then the
    app's, and the app's envelope keeps only the outer agent's calls."""
    tel_ctx = capture_setup.tel.agent_context

    def run(in_app: bool) -> tuple[str, list[Any]]:
        async def app(url: str) -> str:
            if not in_app:
                return await li_agent_app.run_agent_as_tool(url)
            with tel_ctx.envelope(scope="session", agent_name="Support desk"):
                return await li_agent_app.run_agent_as_tool(url)

        with StubServer() as stub:
            return asyncio.run(app(stub.openai_base_url)), stub.requests

    for in_app in (False, True):
        capture_setup.tel.span_exporter.clear()
        out, requests, tel = _plain_and_instrumented(
            capture_setup, lambda in_app=in_app: run(in_app))
        assert out == REPLY
        assert len(requests) == 3  # the tool call, the inner agent's answer, the outer's
        outer, inner = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["created_at"])
        envelope, nested = outer["context_envelope"], inner["context_envelope"]
        assert (envelope["scope"], envelope["metadata"]["gen_ai.agent.name"]) == (
            ("session", "Support desk") if in_app else ("turn", "Triage agent"))
        (call_id,) = [b["item_id"].split(":", 1)[1] for a in outer["context_assemblies"]
                      for b in a["ordered_blocks"] if b["context_kind"] == "tool_result"]
        assert (nested["scope"], nested["parent_id"], nested["metadata"],
                nested["runtime_refs"]) == (
            "tool_invocation", envelope["context_id"], {"gen_ai.agent.name": "Order agent"},
            [f"tool_call:{call_id}"])
        # the outer agent's two calls in its envelope, the inner agent's in the child's
        assert len(outer["context_assemblies"]) == 2
        (answer,) = inner["context_assemblies"]
        assert _ids(answer)[1:] == [(text_message_id("user", "Where is order A-1042?"),
                                     "user_message")]
        spans = {s.attributes["context.id"]: s for s in tel.spans()
                 if s.name == "context.envelope"}
        assert set(spans) == {envelope["context_id"], nested["context_id"]}
        child, parent = spans[nested["context_id"]], spans[envelope["context_id"]]
        assert child.parent is not None and child.parent.span_id == parent.context.span_id
        assert child.end_time <= parent.end_time
        assert all(b["rebuild"]["status"] == "complete" for b in (outer, inner))


def _react() -> tuple[list[str], list[Any]]:
    with StubServer() as stub:
        out = asyncio.run(li_agent_app.run_react(stub.openai_base_url))
        return out, stub.requests


def test_a_react_agents_runs_are_turns_holding_their_model_calls(capture_setup: Any) -> None:
    """``ReActAgent.run``: one envelope per run with the agent's name; the reasoning call
    (the tool asked for in the ReAct text format) and the answer after the tool's observation
    join it; the memory's messages keep one id across the runs' prompts."""
    out, requests, tel = _plain_and_instrumented(capture_setup, _react)
    assert out == [REPLY, REPLY]
    assert len(requests) == 3  # the action, the answer after the observation, the follow-up

    first, second = tel.bundles()
    for bundle in (first, second):
        envelope = bundle["context_envelope"]
        assert (envelope["scope"], envelope["metadata"]) == (
            "turn", {"gen_ai.agent.name": "Order agent"})
        assert bundle["rebuild"]["status"] == "complete"
        assert [b["max_tokens"] for b in bundle["context_budgets"]].count(4000) >= 1
    asked = text_message_id("user", li_agent_app.REACT)
    action, answer = (_ids(a) for a in first["context_assemblies"])
    assert action[0][1] == "system_prompt"  # the ReAct prompt: its tools in words
    assert action[1:] == [(asked, "user_message")]
    # the question, the reasoning step (the tool call as text), the tool's observation (a
    # user message in ReAct's format)
    assert [k for _, k in answer] == ["system_prompt", "session_history", "session_history",
                                      "user_message"]
    assert answer[1][0] == asked
    (follow_up,) = second["context_assemblies"]
    # the memory: the question, the agent's reasoning (its steps, as ReActAgent keeps them,
    # named by the memory like any message), the new question
    blocks = _ids(follow_up)[1:]
    assert [blocks[0], blocks[2]] == [
        (asked, "session_history"), (text_message_id("user", li_agent_app.SECOND),
                                     "user_message")]
    assert blocks[1][0].startswith("llama_index_msg:") and blocks[1][1] == "session_history"
    assert (ORDER_TEXT in _exported(tel)) is capture_setup.capture


def test_a_codeact_agents_run_is_a_turn_holding_its_model_calls(capture_setup: Any) -> None:
    """``CodeActAgent.run``: one envelope with the agent's name holding its two model calls
    (the code it writes, the answer from the code's result)."""
    def run() -> tuple[str, list[Any]]:
        with StubServer() as stub:
            out = asyncio.run(li_agent_app.run_codeact(stub.openai_base_url))
            return out, stub.requests

    out, requests, tel = _plain_and_instrumented(capture_setup, run)
    assert out == REPLY and len(requests) == 2
    (bundle,) = tel.bundles()
    assert (bundle["context_envelope"]["scope"], bundle["context_envelope"]["metadata"]) == (
        "turn", {"gen_ai.agent.name": "Code agent"})
    code, answer = (_ids(a) for a in bundle["context_assemblies"])
    asked = text_message_id("user", li_agent_app.CODE)
    assert code[1:] == [(asked, "user_message")]
    # the code it wrote and the code's result (a user message in CodeAct's form)
    assert answer[1:2] == [(asked, "session_history")]
    assert [k for _, k in answer] == ["system_prompt", "session_history", "session_history",
                                      "user_message"]
    assert bundle["rebuild"]["status"] == "complete"


def test_memory_read_outside_a_run_names_only_the_next_call_and_does_not_grow(
        li_on: CapturedTelemetry) -> None:
    """An application reading a memory outside any agent run or chat (a page showing the
    history, say) leaves the names of what it read for the next model call only: reading it
    again replaces them; they never pile up however often it reads (they did: every read
    added the whole history again to a context variable that nothing reset)."""
    from llama_index.core.llms import ChatMessage
    from llama_index.core.memory import Memory

    from otel_agent_context.instrumentation._common import KNOWN_MESSAGES

    def read_history_page() -> tuple[int, dict[tuple[str, str], list[str]] | None]:
        memory = Memory.from_defaults(token_limit=1000, tokenizer_fn=lambda t: t.split())
        memory.put_messages([ChatMessage(role="user", content=Q1),
                             ChatMessage(role="assistant", content=REPLY)])
        for _ in range(40):
            got = memory.get()
        return len(got), KNOWN_MESSAGES.get()

    count, known = contextvars.copy_context().run(read_history_page)
    assert count == 2
    assert known is not None
    # the two messages of the last read, once each: not 40 reads' worth
    assert sorted((key, len(names)) for key, names in known.items()) == [
        (("assistant", REPLY), 1), (("user", Q1), 1)]
    assert known[("user", Q1)] == [text_message_id("user", Q1)]
