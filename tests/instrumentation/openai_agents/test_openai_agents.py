"""The OpenAI Agents SDK instrumentor on a real Agents SDK app (a tool, a handoff, a
session, a streamed run; ``agents_app``) against the loopback stub's Responses API: one
envelope per run with the agent's name and the session as conversation, the model calls
inside it, the handoff as an envelope of scope ``handoff``, and the app unchanged."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import agents_app
import pytest
from agents import (
    Agent,
    GuardrailFunctionOutput,
    InputGuardrailTripwireTriggered,
    OpenAIResponsesModel,
    OutputGuardrailTripwireTriggered,
    Runner,
    input_guardrail,
    output_guardrail,
)
from framework_helpers import framework_on
from openai import AsyncOpenAI
from stub_server import REPLY, StubServer

from otel_agent_context.instrumentation.openai_agents import OpenAIAgentsContextInstrumentor
from otel_agent_context.testing import CapturedTelemetry


def _run(tmp_path: Path, name: str) -> tuple[list[str], list[tuple[str, dict[str, Any]]]]:
    with StubServer() as stub:
        outputs = agents_app.run(stub.openai_base_url, str(tmp_path / f"{name}.db"))
        return outputs, stub.requests


def _agents_on(setup: Any) -> Any:
    return framework_on(OpenAIAgentsContextInstrumentor(), setup)


@pytest.fixture
def tel(capture_setup: Any) -> Iterator[CapturedTelemetry]:
    """Content capture off and on."""
    with _agents_on(capture_setup) as tel:
        yield tel


def _envelopes(tel: CapturedTelemetry) -> list[dict[str, Any]]:
    return [b["context_envelope"] for b in tel.bundles()]


def test_runs_are_turn_envelopes_with_agent_session_and_handoff(
        tel: CapturedTelemetry, tmp_path: Path) -> None:
    outputs, requests = _run(tmp_path, "app")
    assert outputs == [REPLY] * 3
    assert [path for path, _ in requests] == ["/v1/responses"] * 6  # 2 model calls a run

    envs = _envelopes(tel)
    turns = [e for e in envs if e["scope"] == "turn"]
    handoffs = [e for e in envs if e["scope"] == "handoff"]
    assert len(envs) == 4 and len(turns) == 3 and len(handoffs) == 1  # no loose envelope
    for env in turns:
        assert env["metadata"]["gen_ai.agent.name"] == "Triage agent"
        assert env["metadata"]["gen_ai.conversation.id"] == "conversation-42"
        chats = [r for r in env["telemetry_refs"] if r["span_name"].startswith("chat ")]
        assert len(chats) == 2  # both model calls of the run (streamed run included) joined
        assert len(env["assembly_refs"]) == 2
    handoff = handoffs[0]
    assert handoff["parent_id"] == turns[1]["context_id"]
    assert handoff["metadata"]["gen_ai.agent.name"] == "Spanish agent"
    # the handoff's span is in the run's trace, under its envelope
    assert handoff["telemetry_refs"][0]["trace_id"] == turns[1]["telemetry_refs"][0]["trace_id"]

    bundle = next(b for b in tel.bundles() if b["context_envelope"]["scope"] == "handoff")
    (selection,) = bundle["context_selections"]
    # what went across: the first run's history (session), this run's request, the
    # handoff call and its output
    assert selection["candidate_count"] == 7
    assert len(selection["selected_item_refs"]) == 7
    kinds = [i["context_kind"] for i in bundle["context_items"]]
    # named and kinded as the next model call names them: the latest user message is the
    # user's, the earlier one history
    assert kinds.count("user_message") == 1 and kinds.count("tool_result") == 2
    # one identity: what went across is, id for id, the history of the Spanish agent's
    # model call (its assembly: its own instructions, then these items)
    run = next(b for b in tel.bundles()
               if b["context_envelope"]["context_id"] == turns[1]["context_id"])
    spanish_call = run["context_assemblies"][-1]["ordered_blocks"]
    assert [b["item_id"] for b in spanish_call[1:]] == selection["selected_item_refs"]
    assert any(i.startswith("tool_call:") for i in selection["selected_item_refs"])

    text = json.dumps(tel.bundles())
    if tel.agent_context.capture_content:
        assert "What is the weather in Paris?" in text
        assert "Please answer in Spanish." in text
    else:
        assert "Paris" not in text and "Spanish." not in text


def test_the_app_is_unchanged(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    bare = _run(tmp_path, "bare")
    with _agents_on(request.getfixturevalue("alone")):  # instrumented only from here
        instrumented = _run(tmp_path, "instrumented")
    assert instrumented == bare  # same outputs and the same request bodies


def test_input_filter_removals_are_omitted_items(alone: Any) -> None:
    from agents import Agent, Runner, handoff
    from agents.extensions import handoff_filters

    with _agents_on(alone) as tel:
        with StubServer() as stub:
            triage = agents_app.build(stub.openai_base_url)
            spanish = triage.handoffs[0]
            assert isinstance(spanish, Agent)
            triage = triage.clone(handoffs=[handoff(
                spanish, input_filter=handoff_filters.remove_all_tools)])
            first = Runner.run_sync(triage, agents_app.PARIS)
            result = Runner.run_sync(triage, first.to_input_list()
                                     + [{"role": "user", "content": agents_app.SPANISH}])
            assert result.final_output == REPLY
        bundles = tel.bundles()
    bundle = next(b for b in bundles if b["context_envelope"]["scope"] == "handoff")
    (selection,) = bundle["context_selections"]
    omitted = selection["omitted_item_refs"]
    # remove_all_tools drops the weather call and its output, and the handoff call's pair;
    # the two user messages and the assistant's reply go across
    assert selection["candidate_count"] == 7
    assert len(selection["selected_item_refs"]) == 3
    calls = sorted(o["item_id"] for o in omitted if o["item_id"].startswith("tool_call:"))
    results = sorted(o["item_id"] for o in omitted if o["item_id"].startswith("tool_result:"))
    assert len(calls) == 2 and [c.replace("tool_call:", "tool_result:") for c in calls] == results
    assert len(omitted) == 4
    assert {(o["reason"], o["detail"]) for o in omitted} == {
        ("custom", "input_filter:remove_all_tools")}


def test_instrumenting_imports_nothing_and_wraps_on_import() -> None:
    import subprocess
    import sys

    code = ("import sys\n"
            "from otel_agent_context.instrumentation.openai_agents import "
            "OpenAIAgentsContextInstrumentor\n"
            "OpenAIAgentsContextInstrumentor().instrument()\n"
            "print('agents' in sys.modules, 'openai' in sys.modules)\n"
            "import agents.run\n"
            "print(type(vars(agents.run.AgentRunner)['run']).__name__)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True).stdout.split("\n")
    assert out[:2] == ["False False", "FunctionWrapper"]


def _without_and_with(setup: Any, app: Any) -> tuple[Any, list[Any], Any, list[Any]]:
    """``app(base_url)`` run on a fresh stub before the SDK is instrumented and again with
    it: (what the app saw, the request bodies) both times."""
    with StubServer() as stub:
        plain = app(stub.openai_base_url)
        plain_bodies = [body for _, body in stub.requests]
    setup.tel.span_exporter.clear()
    with _agents_on(setup), StubServer() as stub:
        seen = app(stub.openai_base_url)
        bodies = [body for _, body in stub.requests]
    return plain, plain_bodies, seen, bodies


@input_guardrail
async def no_homework(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info={"topic": "school assignment"},
                                   tripwire_triggered="homework" in str(given))


@output_guardrail
async def no_delivery_promises(ctx: Any, agent: Any, output: Any) -> GuardrailFunctionOutput:
    return GuardrailFunctionOutput(output_info=None, tripwire_triggered="arrive" in str(output))


def _guarded_runs(base_url: str) -> list[str]:
    """Three runs of an agent with an input and an output guardrail (as the SDK's docs write
    them): one trips the input guardrail, one the output guardrail, one streamed trips it too.
    Returns what the application saw."""
    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    agent = Agent(name="Support agent", instructions="Help with orders.",
                  input_guardrails=[no_homework], output_guardrails=[no_delivery_promises],
                  model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))

    async def streamed() -> None:
        result = Runner.run_streamed(agent, "When will it come?")
        async for _ in result.stream_events():
            pass

    async def runs() -> list[str]:  # one event loop: the client's connections live in it
        seen = []
        for run in (lambda: Runner.run(agent, "Do my homework"),
                    lambda: Runner.run(agent, "Where is my order?"), streamed):
            try:
                await run()
                seen.append("no tripwire")
            except (InputGuardrailTripwireTriggered,
                    OutputGuardrailTripwireTriggered) as error:
                seen.append(f"{type(error).__name__}: {error}")
        return seen

    return asyncio.run(runs())


def test_guardrail_tripwires_are_policy_refs_and_blocking_missing_context(
        capture_setup: Any) -> None:
    plain, plain_requests, seen, requests = _without_and_with(capture_setup, _guarded_runs)
    tel = capture_setup.tel
    assert seen == plain
    assert [s.split(":")[0] for s in seen] == [
        "InputGuardrailTripwireTriggered", "OutputGuardrailTripwireTriggered",
        "OutputGuardrailTripwireTriggered"]
    assert len(requests) == len(plain_requests)
    bundles = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["created_at"])
    refs = ["openai_agents.guardrail:input:no_homework",
            "openai_agents.guardrail:output:no_delivery_promises",
            "openai_agents.guardrail:output:no_delivery_promises"]
    assert [b["context_envelope"]["policy_refs"] for b in bundles] == [[r] for r in refs]
    assert [b["missing_context"] for b in bundles] == [
        [{"missing_id": ref, "needed_for": action, "severity": "blocking",
          "blocked_actions": [action], "status": "open",
          "created_at": b["missing_context"][0]["created_at"]}]
        for ref, action, b in zip(refs, ["agent_run", "final_output", "final_output"],
                                  bundles, strict=True)]
    envelopes = [s for s in tel.spans() if s.name == "context.envelope"]
    assert [s.status.status_code.name for s in envelopes] == ["ERROR"] * 3
    assert "school assignment" not in json.dumps(tel.bundles())  # output_info: never
    metric = {(labels["severity"]): value
              for labels, value in tel.metrics()["context.missing.detected"]}
    assert metric == {"blocking": 3}


def _nested_runs(base_url: str, conversation_id: str | None = None) -> list[str]:
    """An orchestrator that uses a translator agent as a tool (``Agent.as_tool``, as the
    SDK's docs write it) and an input guardrail whose judge is an agent run of its own (the
    orchestrator's run in a stored ``conversation_id`` if given)."""
    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    model = OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client)
    translator = Agent(name="Translator", instructions="Translate to French.", model=model)
    judge = Agent(name="Homework judge", instructions="Is this homework?", model=model)

    @input_guardrail
    async def judged(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
        verdict = await Runner.run(judge, str(given), context=ctx.context)
        return GuardrailFunctionOutput(output_info=None,
                                       tripwire_triggered="homework" in verdict.final_output)

    orchestrator = Agent(
        name="Orchestrator", instructions="Use the tools to translate.", model=model,
        input_guardrails=[judged],
        tools=[translator.as_tool(tool_name="translate_fr",
                                  tool_description="Translate the input to French")])

    async def run() -> list[str]:
        result = await Runner.run(orchestrator,
                                  'Say hi in French [call:translate_fr {"input": "hi"}]',
                                  **({"conversation_id": conversation_id}
                                     if conversation_id else {}))
        return [str(result.final_output)]

    return asyncio.run(run())


def test_runs_inside_a_run_are_part_of_its_conversation(capture_setup: Any) -> None:
    """The tool's and the judge's runs, which the SDK starts without the conversation, are
    part of the orchestrator's (the store's session view lists them with its turns)."""
    _without_and_with(capture_setup, lambda url: _nested_runs(url, "conv_nested"))
    named = {e["metadata"]["gen_ai.agent.name"]: e["metadata"].get("gen_ai.conversation.id")
             for e in _envelopes(capture_setup.tel)}
    assert named == {"Orchestrator": "conv_nested", "Translator": "conv_nested",
                     "Homework judge": "conv_nested"}


def test_runs_inside_a_run_are_their_own_envelopes(capture_setup: Any) -> None:
    plain, plain_bodies, seen, bodies = _without_and_with(capture_setup, _nested_runs)
    tel = capture_setup.tel
    assert seen == plain
    # 4 model calls: judge, orchestrator x2, translator (the judge runs beside the first:
    # their order varies, and with it the stub's numbering of its ids)
    def same(given: list[Any]) -> list[str]:
        return sorted(re.sub(r"(call|fc|msg|resp)_\d+", r"\1_N", json.dumps(b)) for b in given)
    assert same(bodies) == same(plain_bodies)
    assert len(bodies) == 4

    envs = {e["metadata"]["gen_ai.agent.name"]: e for e in _envelopes(tel)}
    assert sorted(envs) == ["Homework judge", "Orchestrator", "Translator"]
    outer, tool, judge = envs["Orchestrator"], envs["Translator"], envs["Homework judge"]
    assert (outer["scope"], tool["scope"], judge["scope"]) == ("turn", "tool_invocation", "task")
    assert outer.get("parent_id") is None
    assert tool["parent_id"] == judge["parent_id"] == outer["context_id"]
    # the tool run names the call it answers, the id of that call's item in the outer run
    call_id = tool["runtime_refs"][0].removeprefix("tool_call:")
    outer_bundle = next(b for b in tel.bundles()
                        if b["context_envelope"]["context_id"] == outer["context_id"])
    assert f"tool_call:{call_id}" in {i["item_id"] for i in outer_bundle["context_items"]}
    assert "runtime_refs" not in judge or not judge["runtime_refs"]
    # each model call in its own agent's envelope: the translator's instructions are not
    # the orchestrator's context
    assert [len(e["assembly_refs"]) for e in (outer, tool, judge)] == [2, 1, 1]
    spans = {s.context.span_id: s for s in tel.spans()}
    by_id = {s.attributes["context.id"]: s for s in spans.values()
             if s.name == "context.envelope"}
    for inner in (tool, judge):  # children of the outer run's envelope span, in its trace
        span = by_id[inner["context_id"]]
        assert span.parent is not None
        assert span.parent.span_id == by_id[outer["context_id"]].context.span_id


def test_a_run_inside_the_applications_envelope_joins_it(capture_setup: Any) -> None:
    with _agents_on(capture_setup) as tel, StubServer() as stub:
        client = AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
        agent = Agent(name="Support agent", instructions="Help.",
                      model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
        with tel.agent_context.envelope(agent_name="my app") as env:
            asyncio.run(Runner.run(agent, "hello"))
    (only,) = _envelopes(tel)
    assert only["context_id"] == env.context_id
    assert len(only["assembly_refs"]) == 1


def test_runs_inside_a_run_that_joined_the_applications_envelope(capture_setup: Any) -> None:
    """The run joins the application's envelope; an agent used as a tool inside it, and a
    guardrail's judge, are still envelopes of their own, children of the application's."""
    tel = capture_setup.tel
    with _agents_on(capture_setup), StubServer() as stub, \
            tel.agent_context.envelope(agent_name="my app") as env:
        _nested_runs(stub.openai_base_url)
    envs = {e["metadata"]["gen_ai.agent.name"]: e for e in _envelopes(tel)}
    assert sorted(envs) == ["Homework judge", "Translator", "my app"]
    assert envs["my app"]["context_id"] == env.context_id
    assert len(envs["my app"]["assembly_refs"]) == 2  # the orchestrator's two calls
    assert (envs["Translator"]["scope"], envs["Homework judge"]["scope"]) == (
        "tool_invocation", "task")
    assert envs["Translator"]["parent_id"] == envs["Homework judge"]["parent_id"] == (
        env.context_id)


def test_a_cancelled_streamed_run_fails_its_envelope(capture_setup: Any) -> None:
    tel = capture_setup.tel
    with _agents_on(capture_setup), StubServer() as stub:
        client = AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
        agent = Agent(name="Support agent", instructions="Help.",
                      model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))

        async def cancelled() -> None:
            result = Runner.run_streamed(agent, "hello")
            result.run_loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await result.run_loop_task
            await asyncio.sleep(0)  # the task's done callbacks

        asyncio.run(cancelled())
    (span,) = [s for s in tel.spans() if s.name == "context.envelope"]
    assert span.status.status_code.name == "ERROR"
    assert span.attributes["error.type"] == "CancelledError"


def test_composed_with_the_official_agents_instrumentor_one_trace(
        setup: Any, tmp_path: Path) -> None:
    """The official ``opentelemetry-instrumentation-genai-openai-agents`` on (it needs the
    SDK's tracing: on here, its platform exporter replaced so nothing leaves loopback), with
    our OpenAI instrumentor alone or composed with the official OpenAI one either way: one
    trace a run, the run's envelope span its root, the official's workflow and agent spans
    under it, each model call one span under the agent that made it; the same bundles."""
    from agents import set_trace_processors, set_tracing_disabled
    from opentelemetry.instrumentation.genai.openai_agents import OpenAIAgentsInstrumentor

    with _agents_on(setup) as tel:
        alone_ids = _bundle_ids(tel, tmp_path, "alone")
    set_trace_processors([])  # the SDK's default exporter would post to its platform
    set_tracing_disabled(False)
    official = OpenAIAgentsInstrumentor()
    official.instrument(tracer_provider=tel.tracer_provider, meter_provider=tel.meter_provider)
    try:
        with _agents_on(setup):
            composed_ids = _bundle_ids(tel, tmp_path, "composed")
            spans = tel.spans()
    finally:
        official.uninstrument()
        set_tracing_disabled(True)
        set_trace_processors([])
    assert composed_ids == alone_ids and len(alone_ids) == 4

    by_id = {s.context.span_id: s for s in spans}
    envelopes = [s for s in spans if s.name == "context.envelope"
                 and s.attributes["context.scope"] == "turn"]
    assert len(envelopes) == 3
    for env in envelopes:
        assert env.parent is None
        trace_spans = [s for s in spans if s.context.trace_id == env.context.trace_id]
        names = sorted(s.name.split(" ")[0] for s in trace_spans)
        workflow = next(s for s in trace_spans if s.name.startswith("invoke_workflow"))
        assert workflow.parent.span_id == env.context.span_id
        chats = [s for s in trace_spans if s.name.startswith("chat ")]
        assert len(chats) == 2  # one span a model call, also composed with the official one
        for chat in chats:
            parent = by_id[chat.parent.span_id]
            assert parent.name.startswith("invoke_agent ")
            assert chat.attributes["context.id"] == env.attributes["context.id"]
        assert names.count("invoke_agent") >= 1 and names.count("invoke_workflow") == 1
    # the handoff: the Spanish agent's call under the Spanish agent's span
    spanish = [s for s in spans if s.name == "invoke_agent Spanish agent"]
    assert len(spanish) == 1
    assert any(by_id[s.parent.span_id] is spanish[0] for s in spans
               if s.name.startswith("chat ") and s.parent is not None)


def _bundle_ids(tel: CapturedTelemetry, tmp_path: Path, name: str
                ) -> list[tuple[str, list[str]]]:
    """Each bundle's scope and item ids, in order, after the app ran once."""
    tel.clear()
    outputs, _ = _run(tmp_path, name)
    assert outputs == [REPLY] * 3
    bundles = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["created_at"])
    return [(b["context_envelope"]["scope"],
             [re.sub(r"(call|fc|msg)_\d+", r"\1_N", i["item_id"])
              for i in b.get("context_items", [])]) for b in bundles]


def _rejecting_runs(base_url: str) -> list[str]:
    """Two tools guarded as the SDK's docs write it: one whose output guardrail rejects an
    account number, one whose input guardrail rejects a delete; the run goes on both times."""
    from agents import (
        ToolGuardrailFunctionOutput,
        function_tool,
        tool_input_guardrail,
        tool_output_guardrail,
    )

    @tool_output_guardrail
    def no_account_numbers(data: Any) -> ToolGuardrailFunctionOutput:
        if "ACCT-" in str(data.output):
            return ToolGuardrailFunctionOutput.reject_content("Account data withheld.")
        return ToolGuardrailFunctionOutput.allow()

    @tool_input_guardrail
    def no_deletes(data: Any) -> ToolGuardrailFunctionOutput:
        return ToolGuardrailFunctionOutput.reject_content("Deleting is not allowed.")

    @function_tool(tool_output_guardrails=[no_account_numbers])
    def customer(name: str) -> str:
        """The customer's record."""
        return f"{name}: ACCT-4471-0099, gold tier"

    @function_tool(tool_input_guardrails=[no_deletes])
    def delete_order(order: int) -> str:
        """Delete an order."""
        return f"order {order} deleted"

    client = AsyncOpenAI(base_url=base_url, api_key="sk-test", max_retries=0)
    agent = Agent(name="Support agent", instructions="Help.", tools=[customer, delete_order],
                  model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))

    async def runs() -> list[str]:
        first = await Runner.run(agent, 'Who is Ann? [call:customer {"name": "Ann"}]')
        second = await Runner.run(agent, 'Drop it [call:delete_order {"order": 7}]')
        return [str(first.final_output), str(second.final_output)]

    return asyncio.run(runs())


def test_tool_guardrail_rejections_are_redactions_and_policy_refs(capture_setup: Any) -> None:
    plain, plain_bodies, seen, bodies = _without_and_with(capture_setup, _rejecting_runs)
    tel = capture_setup.tel
    assert seen == plain and bodies == plain_bodies
    # what the model saw instead of the tool's results
    outputs = [i["output"] for b in bodies for i in b["input"]
               if isinstance(i, dict) and i.get("type") == "function_call_output"]
    assert outputs == ["Account data withheld.", "Deleting is not allowed."]

    bundles = sorted(tel.bundles(), key=lambda b: b["context_envelope"]["created_at"])
    assert len(bundles) == 2
    for bundle, kind, name in zip(bundles, ["tool_output", "tool_input"],
                                  ["no_account_numbers", "no_deletes"], strict=True):
        ref = f"openai_agents.guardrail:{kind}:{name}"
        assert bundle["context_envelope"]["policy_refs"] == [ref]
        # the redacted item is the tool result's block in the run's second model call
        blocks = bundle["context_assemblies"][-1]["ordered_blocks"]
        result_id = next(b["item_id"] for b in blocks if b["item_id"].startswith("tool_result:"))
        (redaction,) = [e for e in bundle["context_events"]
                        if e["event_class"] == "context.redaction.applied"]
        assert redaction["subject_ref"] == f"item:{result_id}"
        assert redaction["metadata"] == {"state": "policy_blocked", "method": "reject_content",
                                         "redacted_by": name, "policy_ref": ref}
    missing = bundles[1]["missing_context"]
    assert [(m["severity"], m["needed_for"], m["blocked_actions"]) for m in missing] == [
        ("high", result_id, ["tool_call"])]
    assert bundles[0].get("missing_context", []) == []
    text = json.dumps(tel.bundles())
    assert "ACCT-4471" not in text  # the withheld result never reaches telemetry
    assert ("Account data withheld." in text) is tel.agent_context.capture_content


def test_a_stored_conversation_and_prompt_are_blocks_of_the_model_call(
        capture_setup: Any) -> None:
    """A run given a conversation the API keeps (``conversation_id``) and an agent of a
    prompt stored with the API: what the model sees from them is not in the request, so
    each is a block naming it (``ref``), in the API's order, and the conversation is the
    run's and the call's ``gen_ai.conversation.id``."""
    with _agents_on(capture_setup) as tel, StubServer() as stub:
        client = AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
        agent = Agent(name="Support agent", instructions="Help.",
                      prompt={"id": "pmpt_support", "version": "3",
                              "variables": {"customer": "Ada Lovelace"}},
                      model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))
        result = asyncio.run(Runner.run(agent, "Where is my order?",
                                        conversation_id="conv_support_7"))
        ((path, body),) = stub.requests
    assert result.final_output == REPLY
    assert path == "/v1/responses"
    assert body["conversation"] == "conv_support_7" and body["prompt"]["id"] == "pmpt_support"

    (bundle,) = tel.bundles()
    assert bundle["context_envelope"]["metadata"]["gen_ai.conversation.id"] == "conv_support_7"
    (assembly,) = bundle["context_assemblies"]
    ids = [b["item_id"] for b in assembly["ordered_blocks"]]
    assert ids[0] == "prompt:pmpt_support@3" and ids[1].startswith("instructions:")
    assert ids[2] == "conversation:conv_support_7" and ids[3].startswith("user:")
    assert len(ids) == 4
    items = {i["item_id"]: i for i in bundle["context_items"]}
    assert items["prompt:pmpt_support@3"]["context_kind"] == "system_prompt"
    assert items["prompt:pmpt_support@3"]["content_ref"] == "openai:prompts/pmpt_support@3"
    assert items["conversation:conv_support_7"]["context_kind"] == "session_history"
    assert items["conversation:conv_support_7"]["content_ref"] == \
        "openai:conversations/conv_support_7"
    for ref in ("prompt:pmpt_support@3", "conversation:conv_support_7"):
        assert items[ref]["content_mode"] == "ref"
    (chat,) = [s for s in tel.spans() if s.name.startswith("chat ")]
    assert chat.attributes["gen_ai.conversation.id"] == "conv_support_7"
    # the template's variables reach the model through the stored prompt: content, never
    # recorded, captured or not
    assert "Ada Lovelace" not in json.dumps(tel.bundles())
    assert all("Ada Lovelace" not in str(v) for s in tel.spans() for v in s.attributes.values())
