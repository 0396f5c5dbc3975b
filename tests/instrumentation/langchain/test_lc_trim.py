"""``trim_messages`` as a budget: max_tokens, overflow, one truncation record per message."""

from __future__ import annotations

from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, trim_messages
from langchain_core.messages import utils as message_utils
from lc_helpers import count_words, events, one, strip_times, tree

from otel_agent_context import _semconv as S

HISTORY = [
    SystemMessage("Answer in one sentence.", id="sys"),             # 4 words
    HumanMessage("Where is my order number 42?", id="h1"),           # 6
    AIMessage("It left the warehouse on Monday.", id="a1"),          # 6
    HumanMessage("When will it arrive at my door?", id="h2"),        # 7
    AIMessage("Expect it by Thursday afternoon.", id="a2"),          # 5
    HumanMessage("Can I change the address?", id="h3"),              # 5
]


def test_last_with_system_drops_the_oldest_after_the_system_prompt(tel) -> None:
    kept = trim_messages(HISTORY, max_tokens=15, token_counter=count_words, strategy="last",
                         include_system=True)
    assert [m.id for m in kept] == ["sys", "a2", "h3"]

    assert tree(tel) == [("context.envelope", None), ("context.budget", "context.envelope")]
    budget = one(tel, "context.budget")
    assert dict(budget.attributes) == {
        S.BUDGET_ID: "bud_1", S.BUDGET_TARGET: "model", S.BUDGET_MAX_TOKENS: 15,
        S.BUDGET_OVERFLOW_STRATEGY: "truncate_middle", S.CONTEXT_ID: "ctx_1",
        S.BUDGET_ACTUAL_TOKENS: 14, S.BUDGET_ACTUAL_ITEMS: 3, S.BUDGET_OVERFLOW: True,
        S.BUDGET_OVERFLOW_TOKENS: 18, S.BUDGET_UTILIZATION: 14 / 15}
    # totals are the counter's; a message's size is an estimate in its units (the counter
    # may be a paid API, so it is not called per message): within 2 of its count
    truncated = events(budget)
    assert [(name, a[S.ITEM_ID], a[S.TRUNCATION_STRATEGY], a[S.TRUNCATION_TOKENS_AFTER])
            for name, a in truncated] == [
        (S.EVENT_BUDGET_TRUNCATED, mid, "truncate_middle", 0) for mid in ("h1", "a1", "h2")]
    for (_, a), n in zip(truncated, (6, 6, 7), strict=True):
        assert abs(a[S.TRUNCATION_TOKENS_BEFORE] - n) <= 2
    envelope = one(tel, "context.envelope")
    assert envelope.attributes[S.CONTEXT_SCOPE] == "turn"
    assert envelope.attributes[S.CONTEXT_SPAN_COUNT] == 1

    (bundle,) = tel.bundles()
    (budget_record,) = strip_times(bundle["context_budgets"])
    records = budget_record.pop("truncation_records")
    assert budget_record == {
        "budget_id": "bud_1", "target": "model", "max_tokens": 15, "actual_tokens": 14,
        "actual_items": 3, "overflow_strategy": "truncate_middle", "overflow": True,
        "overflow_tokens": 18, "utilization": 14 / 15}
    assert [(r["item_id"], r["tokens_before"]) for r in records] == [
        (a[S.ITEM_ID], a[S.TRUNCATION_TOKENS_BEFORE]) for _, a in truncated]
    assert [i["item_id"] for i in bundle["context_items"]] == ["h1", "a1", "h2"]
    metrics = tel.metrics()
    assert metrics["context.truncations"] == [
        ({"target": "model", "agent": "unknown", "strategy": "truncate_middle"}, 3)]
    assert metrics["context.truncated_tokens"] == [
        ({"target": "model", "agent": "unknown"},
         sum(a[S.TRUNCATION_TOKENS_BEFORE] for _, a in truncated))]  # the estimates' sum
    assert metrics["context.budget.overflows"] == [
        ({"target": "model", "agent": "unknown", "overflow_strategy": "truncate_middle"}, 1)]


def test_first_with_partial_cuts_a_message_and_drops_the_newest(tel) -> None:
    notes = HumanMessage("line one\nline two\nline three\nline four", id="notes")
    messages = [HumanMessage("hello there", id="hi"), notes, AIMessage("ok then", id="ok")]
    kept = trim_messages(messages, max_tokens=6, token_counter=count_words, strategy="first",
                         allow_partial=True)
    assert [m.id for m in kept] == ["hi", "notes"]
    assert kept[1].content == "line one\nline two\n"

    budget = one(tel, "context.budget")
    assert budget.attributes[S.BUDGET_OVERFLOW_STRATEGY] == "truncate_tail"
    assert budget.attributes[S.BUDGET_ACTUAL_TOKENS] == 6
    assert budget.attributes[S.BUDGET_OVERFLOW_TOKENS] == 6
    assert events(budget) == [
        (S.EVENT_BUDGET_TRUNCATED, {S.ITEM_ID: "ok", S.TRUNCATION_STRATEGY: "truncate_tail",
                                    S.TRUNCATION_TOKENS_BEFORE: 2,
                                    S.TRUNCATION_TOKENS_AFTER: 0}),
        (S.EVENT_BUDGET_TRUNCATED, {S.ITEM_ID: "notes", S.TRUNCATION_STRATEGY: "truncate_tail",
                                    S.TRUNCATION_TOKENS_BEFORE: 8,
                                    S.TRUNCATION_TOKENS_AFTER: 4}),
    ]


def test_last_without_system_is_custom_and_fitting_history_is_no_overflow(tel) -> None:
    trim_messages(HISTORY[1:], max_tokens=10, token_counter=count_words, strategy="last")
    trim_messages(HISTORY[4:], max_tokens=100, token_counter=count_words, strategy="last")
    first, second = (b for b in sorted(tel.bundles(),
                                       key=lambda b: b["context_envelope"]["context_id"]))
    (cut,) = first["context_budgets"]
    assert cut["overflow_strategy"] == "custom"
    assert [r["item_id"] for r in cut["truncation_records"]] == ["h1", "a1", "h2"]
    (fits,) = second["context_budgets"]
    assert strip_times(fits) == {
        "budget_id": "bud_2", "target": "model", "max_tokens": 100, "actual_tokens": 10,
        "actual_items": 2, "overflow_strategy": "custom", "overflow": False,
        "utilization": 0.1}


def test_len_counter_is_a_budget_of_messages(tel) -> None:
    kept = trim_messages(HISTORY, max_tokens=2, token_counter=len, strategy="last")
    assert [m.id for m in kept] == ["a2", "h3"]
    budget = one(tel, "context.budget")
    assert budget.attributes[S.BUDGET_MAX_ITEMS] == 2
    assert budget.attributes[S.BUDGET_ACTUAL_ITEMS] == 2
    assert budget.attributes[S.BUDGET_OVERFLOW] is True
    assert S.BUDGET_MAX_TOKENS not in budget.attributes
    assert S.BUDGET_OVERFLOW_TOKENS not in budget.attributes
    # truncation records carry estimated tokens (~4 characters a token)
    assert [(e[S.ITEM_ID], e[S.TRUNCATION_TOKENS_BEFORE]) for _, e in events(budget)] == [
        ("sys", 6), ("h1", 7), ("a1", 8), ("h2", 8)]


def test_messages_of_tool_calls_alone_without_ids_are_two_items(tel) -> None:
    """Two messages the model made of tool calls alone (no text), which LangChain gave no
    id: their records name each by its calls (they were one id: type and empty text)."""
    calls = [AIMessage("", tool_calls=[{"name": "lookup", "args": {"id": n}, "id": f"c{n}"}])
             for n in ("1", "2")]
    trim_messages([*calls, HumanMessage("And now?")], max_tokens=1, token_counter=len,
                  strategy="last")
    cut = [e[S.ITEM_ID] for _, e in events(one(tel, "context.budget"))]
    assert len(cut) == len(set(cut)) == 2 and all(i.startswith("msg_") for i in cut)


def test_messages_of_one_text_and_other_media_are_other_items(tel) -> None:
    """Messages LangChain gave no id, of one text and each with an image (its forms: OpenAI's
    ``image_url``, the standard blocks' URL and base64, Anthropic's source) or a block no
    form names: each its own item, the same image again the same item; never its URL or
    data; a tool's result named by its call."""
    from langchain_core.messages import ToolMessage

    from otel_agent_context.instrumentation.langchain._items import message_id

    def ask(block: dict) -> HumanMessage:
        return HumanMessage([{"type": "text", "text": "Is this it?"}, block])

    media = [{"type": "image_url", "image_url": {"url": "https://cdn.example/a.png"}},
             {"type": "image_url", "image_url": "https://cdn.example/b.png"},
             {"type": "image", "url": "https://cdn.example/c.png"},
             {"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"},
             {"type": "image", "source": {"type": "base64", "data": "R0lGODlh"}},
             {"type": "file", "file": {"file_id": "file-9"}},
             {"type": "widget", "shape": "round"}]
    messages = [*map(ask, media), ask(dict(media[0])), HumanMessage("Is this it?"),
                ToolMessage("ok", tool_call_id="call_7"), ToolMessage("ok", tool_call_id="c8")]
    ids = [message_id(m) for m in messages]
    assert ids[len(media)] == ids[0]
    assert len(set(ids)) == len(ids) - 1
    assert ids[-2:] == ["tool_result:call_7", "tool_result:c8"]
    trim_messages(messages, max_tokens=1, token_counter=len, strategy="last")
    cut = [e[S.ITEM_ID] for _, e in events(one(tel, "context.budget"))]
    assert cut == [*ids[:len(media)], ids[0] + "#2", *ids[len(media) + 1:-1]]  # its copy
    recorded = str([(dict(s.attributes), [dict(e.attributes) for e in s.events])
                    for s in tel.spans()])
    assert "Is this it?" not in recorded  # (content capture is off: no text either)
    assert not any(s in recorded for s in ("cdn.example", "iVBOR", "R0lG", "file-9"))


def test_a_standard_block_is_named_as_the_part_callbacks_see(tel) -> None:
    """LangChain hands its callbacks (and so the client call) a standard block converted to
    an OpenAI part (base64 data as a data URL, audio as ``input_audio``), while its trim
    and middleware see the block as given: one message, one id."""
    from otel_agent_context.instrumentation.langchain._items import message_id

    def ask(block: dict) -> str:
        return message_id(HumanMessage([{"type": "text", "text": "Is this it?"}, block]))

    assert ask({"type": "image", "base64": "iVBORw0KGgo=", "mime_type": "image/png"}) == \
        ask({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}})
    assert ask({"type": "image", "url": "https://cdn.example/c.png"}) == \
        ask({"type": "image_url", "image_url": {"url": "https://cdn.example/c.png"}})
    assert ask({"type": "audio", "base64": "UklGRg==", "mime_type": "audio/wav"}) == \
        ask({"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}})
    assert ask({"type": "image", "base64": "iVBORw0KGgo="}) != ask({"type": "image",
                                                                     "base64": "R0lGODlh"})


def test_first_strategy_names_the_copy_it_cut(tel) -> None:
    """A message asked twice (no ids): ``strategy="first"`` keeps the first and cuts the
    second, whose record names it as a model call's block does, ``<id>#2``, not the kept
    twin."""
    from otel_agent_context.instrumentation.langchain._items import message_id

    history = [HumanMessage("Where is order 42?"), AIMessage("Checking."),
               HumanMessage("Where is order 42?"), AIMessage("It shipped.")]
    kept = trim_messages(history, max_tokens=2, token_counter=len, strategy="first")
    assert kept == history[:2]
    first, answer = message_id(history[0]), message_id(history[3])
    cut = [e[S.ITEM_ID] for _, e in events(one(tel, "context.budget"))]
    assert cut == [f"{first}#2", answer]


def test_a_streamed_message_is_the_message_it_streamed(tel) -> None:
    """A history holding the chunks a stream made (``AIMessageChunk``, ...): each is the item
    its message would be (the same id, kind and tokens: an answer's text, its tool calls)."""
    from langchain_core.messages import AIMessageChunk, HumanMessageChunk, ToolMessage

    from otel_agent_context.instrumentation.langchain._items import message_item

    call = {"name": "lookup", "args": {"id": "42"}, "id": "call_1"}
    pairs = [(AIMessage("It shipped."), AIMessageChunk("It shipped.")),
             (AIMessage("", tool_calls=[call]), AIMessageChunk("", tool_calls=[call])),
             (HumanMessage("When?"), HumanMessageChunk("When?"))]
    for message, chunk in pairs:
        assert message_item(chunk) == message_item(message)
    assert message_item(pairs[1][1]).token_estimate > 0
    assert message_item(pairs[0][0]).item_id.startswith("assistant:")
    assert message_item(pairs[2][1]).context_kind == message_item(pairs[2][0]).context_kind
    trim_messages([*(c for _, c in pairs), ToolMessage("ok", tool_call_id="call_1")],
                  max_tokens=1, token_counter=len, strategy="last")
    cut = [e[S.ITEM_ID] for _, e in events(one(tel, "context.budget"))]
    assert cut == [message_item(m).item_id for m, _ in pairs]


def test_trimmer_in_a_chain_records_into_the_chain_envelope(tel) -> None:
    trimmer = trim_messages(max_tokens=12, token_counter=count_words, strategy="last",
                            include_system=True)
    chain = trimmer | FakeListChatModel(responses=["Yes, until it ships."])
    assert chain.invoke(HISTORY).content == "Yes, until it ships."
    # one envelope for the chain run; the model call joined it
    assert tree(tel) == [("context.envelope", None), ("context.budget", "context.envelope")]
    envelope = one(tel, "context.envelope")
    # an unnamed chain's default run name is its class, not an agent's name: none recorded
    assert S.GEN_AI_AGENT_NAME not in envelope.attributes
    assert [e[S.ITEM_ID] for _, e in events(one(tel, "context.budget"))] == [
        "h1", "a1", "h2", "a2"]


def test_uninstrument_restores_trim_and_records_nothing(tel) -> None:
    from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

    LangChainContextInstrumentor().uninstrument()
    try:
        assert not hasattr(message_utils._first_max_tokens, "__wrapped__")
        assert not hasattr(message_utils._last_max_tokens, "__wrapped__")
        trim_messages(HISTORY, max_tokens=5, token_counter=count_words)
        FakeListChatModel(responses=["x"]).invoke("hi")
        assert tel.spans() == []
    finally:
        LangChainContextInstrumentor().instrument(agent_context=tel.agent_context)
    trim_messages(HISTORY, max_tokens=5, token_counter=count_words)
    assert [s.name for s in tel.spans()] == ["context.budget", "context.envelope"]


def test_without_an_sdk_the_token_counter_is_not_called_again() -> None:
    from langchain_core.messages import BaseMessage
    from opentelemetry.metrics import NoOpMeterProvider
    from opentelemetry.trace import NoOpTracerProvider

    from otel_agent_context import AgentContext
    from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

    calls: list[int] = []

    def counter(messages: list[BaseMessage]) -> int:
        calls.append(len(messages))
        return count_words(messages)

    trim_messages(HISTORY, max_tokens=15, token_counter=counter, strategy="last")
    uninstrumented, calls[:] = list(calls), []
    inst = LangChainContextInstrumentor()
    inst.instrument(agent_context=AgentContext(tracer_provider=NoOpTracerProvider(),
                                               meter_provider=NoOpMeterProvider()))
    try:
        kept = trim_messages(HISTORY, max_tokens=15, token_counter=counter, strategy="last")
    finally:
        inst.uninstrument()
    assert [m.id for m in kept] == ["a2", "h3"]
    assert calls == uninstrumented


def test_the_applications_counter_is_not_called_per_message(tel) -> None:
    # A token counter can be a paid API (a chat model's count-tokens call): the budget takes
    # the totals the trim counted, and estimates each message instead of counting it.
    def calls(instrumented: bool) -> int:
        n = [0]

        def counter(messages: list) -> int:
            n[0] += 1
            return count_words(messages)

        if not instrumented:
            from otel_agent_context.instrumentation.langchain import (
                LangChainContextInstrumentor,
            )

            LangChainContextInstrumentor().uninstrument()
        try:
            for strategy in ("first", "last"):
                trim_messages(HISTORY, max_tokens=15, token_counter=counter,
                              strategy=strategy)
        finally:
            if not instrumented:
                LangChainContextInstrumentor().instrument(agent_context=tel.agent_context)
        return n[0]

    plain = calls(False)
    assert calls(True) <= plain + 2  # at most the result's total, once per trim
    assert len([s for s in tel.spans() if s.name == "context.budget"]) == 2
