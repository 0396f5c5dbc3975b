"""Which selected items reached the prompt (the explicit API): a block names the items whose
text it carries in ``context.block.source_item_refs``, found in process by content; a
selected item no block names is selected but never injected (its selection's
``not_injected_item_refs``, the ``context.items.not_injected`` metric)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from otel_agent_context import ContextItem
from otel_agent_context import _semconv as S
from otel_agent_context._links import MAX_ITEMS, MIN_CHARS, Links
from otel_agent_context._measure import measure
from otel_agent_context.testing import CapturedTelemetry

REFUNDS = "Refunds are issued within 14 days of the return reaching our warehouse."
SHIPPING = "Orders ship within three business days from the Lisbon warehouse."
HOURS = "Support answers from 9:00 to 18:00 on weekdays, Lisbon time."


def doc(item_id: str, text: str) -> ContextItem:
    return ContextItem(item_id=item_id, context_kind="retrieval_result", content=text)


@pytest.fixture(params=[False, True], ids=["no_content", "content"])
def tel(request: pytest.FixtureRequest) -> Any:
    t = CapturedTelemetry(capture_content=request.param)
    yield t
    t.shutdown()


@pytest.fixture
def plain() -> Any:
    """Content capture off."""
    t = CapturedTelemetry()
    yield t
    t.shutdown()


def _blocks(tel: CapturedTelemetry) -> list[dict[str, Any]]:
    return [dict(e.attributes) for s in tel.spans() if s.name == S.SPAN_ASSEMBLY
            for e in s.events if e.name == S.EVENT_ASSEMBLY_BLOCK]


def _not_injected_metric(tel: CapturedTelemetry) -> dict[tuple[str, str], int]:
    return {(labels["agent"], labels["kind"]): value
            for labels, value in tel.metrics().get("context.items.not_injected", [])}


def test_a_block_names_the_selected_items_its_text_carries(tel: CapturedTelemetry) -> None:
    shipping = SHIPPING.replace(" ", "\n", 2)
    prompt = f"Answer from these notes.\n\n[1] {REFUNDS}\n\n[2]   {shipping}"
    with tel.agent_context.envelope(agent_name="support") as env:
        with env.selection(intent="retrieval") as sel:
            sel.selected(doc("refunds", REFUNDS), rank=1)
            sel.selected(doc("shipping", SHIPPING), rank=2)
            sel.selected(doc("hours", HOURS), rank=3)  # retrieved, never put in the prompt
        with env.assembly() as asm:
            asm.block("system", kind="system_prompt", text=prompt)
            asm.block("question", kind="user_message", text="How long do refunds take?")

    system, question = _blocks(tel)
    # whitespace differences (a newline for a space, runs of spaces) do not matter
    assert system[S.BLOCK_SOURCE_ITEM_REFS] == ("refunds", "shipping")
    assert S.BLOCK_SOURCE_ITEM_REFS not in question
    assert system[S.BLOCK_DIGEST].startswith("hmac-sha256:")  # the digest of the text given

    (bundle,) = tel.bundles()
    (assembly,) = bundle["context_assemblies"]
    assert assembly["ordered_blocks"][0]["source_item_refs"] == ["refunds", "shipping"]
    assert assembly["source_item_refs"] == ["system", "refunds", "shipping", "question"]
    (selection,) = bundle["context_selections"]
    assert selection["not_injected_item_refs"] == ["hours"]
    assert [m for m in measure(bundle) if m.name == S.METRIC_ITEMS_NOT_INJECTED] == [
        (S.METRIC_ITEMS_NOT_INJECTED, ("support", "retrieval_result"), 1.0, None)]
    assert _not_injected_metric(tel) == {("support", "retrieval_result"): 1}

    # the texts compared never leave the process, with or without content capture
    block_text = json.dumps(_blocks(tel))
    for text in (REFUNDS, SHIPPING, HOURS, "Answer from these notes"):
        assert text not in block_text
    exported = json.dumps([[dict(s.attributes), [dict(e.attributes) for e in s.events]]
                           for s in tel.spans()], default=str)
    assert (REFUNDS in exported) is tel.agent_context.capture_content  # the item's own content
    assert "Answer from these notes" not in exported


def test_an_item_block_is_matched_by_its_content_and_explicit_refs_are_kept() -> None:
    tel = CapturedTelemetry(capture_content=True)
    try:
        with tel.agent_context.envelope() as env:
            with env.selection() as sel:
                sel.selected(doc("refunds", REFUNDS))
                sel.selected(doc("shipping", SHIPPING))
            with env.assembly() as asm:
                # a ContextItem's content is its text; the caller may name sources itself
                asm.block(ContextItem(item_id="notes", context_kind="user_message",
                                      content=f"Notes: {REFUNDS}"),
                          source_item_refs=["shipping", "notes"])
                asm.block(doc("refunds", REFUNDS))  # the item itself: named by its id
        notes, itself = _blocks(tel)
        assert notes[S.BLOCK_SOURCE_ITEM_REFS] == ("shipping", "refunds")  # not itself
        assert S.BLOCK_SOURCE_ITEM_REFS not in itself
        (bundle,) = tel.bundles()
        assert "not_injected_item_refs" not in bundle["context_selections"][0]
        assert _not_injected_metric(tel) == {}
    finally:
        tel.shutdown()


def test_omitted_items_short_texts_and_other_envelopes_are_not_sources(
        plain: CapturedTelemetry) -> None:
    tel = plain
    short = "Refunds: 14 days."
    assert len(short) < MIN_CHARS
    with tel.agent_context.envelope(agent_name="a") as other, other.selection() as sel:
        sel.selected(doc("elsewhere", HOURS))
    with tel.agent_context.envelope(agent_name="b") as env:
        with env.surface() as surface:
            surface.add(doc("refunds", REFUNDS))
            surface.add(doc("shipping", SHIPPING))
            surface.add(doc("short", short))
        with env.selection() as sel:
            sel.selected(doc("refunds", REFUNDS))
            sel.omitted(doc("shipping", SHIPPING), reason="budget")
            sel.selected(doc("short", short))
            # by id alone: its content unknown here, so no block could be found carrying it
            sel.selected("kb:by-id", kind="retrieval_result")
        with env.assembly() as asm:
            asm.block("prompt", text=f"{REFUNDS} {SHIPPING} {short} {HOURS}")
    (block,) = _blocks(tel)
    # omitted: not a source even though the text is there; too short to be matched;
    # another envelope's item: never compared
    assert block[S.BLOCK_SOURCE_ITEM_REFS] == ("refunds",)
    first, second = tel.bundles()
    assert "context_assemblies" not in first  # nothing assembled: nothing judged
    assert "not_injected_item_refs" not in first["context_selections"][0]
    assert second["context_selections"][0]["not_injected_item_refs"] == ["short"]
    assert _not_injected_metric(tel) == {("b", "retrieval_result"): 1}


def test_a_short_item_is_a_source_only_of_a_block_that_is_its_whole_text(
        plain: CapturedTelemetry) -> None:
    tel = plain
    email, city = "Ana prefers email.", "Ana lives in Porto."
    assert len(email) < MIN_CHARS and len(city) < MIN_CHARS
    with tel.agent_context.envelope(agent_name="memory") as env:
        with env.selection(intent="memory") as sel:
            sel.selected(ContextItem(item_id="fact:email", context_kind="durable_memory",
                                     content=email))
            sel.selected(ContextItem(item_id="fact:city", context_kind="durable_memory",
                                     content=city))
        with env.assembly() as asm:
            asm.block("m1", kind="developer_instruction", text=" Ana prefers\nemail. ")
            asm.block("m2", kind="user_message", text=f"Facts: {city} Reply briefly.")
    whole, inside = _blocks(tel)
    assert whole[S.BLOCK_SOURCE_ITEM_REFS] == ("fact:email",)
    assert S.BLOCK_SOURCE_ITEM_REFS not in inside  # too short to be looked for inside a block
    (bundle,) = tel.bundles()
    assert bundle["context_selections"][0]["not_injected_item_refs"] == ["fact:city"]


def test_surfaced_items_are_sources_until_a_selection_omits_them(plain: CapturedTelemetry) -> None:
    tel = plain
    with tel.agent_context.envelope() as env:
        with env.surface() as surface:  # e.g. an MCP resource read: no selection
            surface.add(ContextItem(item_id="mcp_resource:1",
                                    context_kind="external_resource", content=REFUNDS))
        with env.assembly() as asm:
            asm.block("system", text=f"Policy:\n{REFUNDS}")
        with env.selection() as sel:  # selected by id: its text is known from the surface
            sel.selected("mcp_resource:1", kind="external_resource")
        with env.assembly() as asm:
            asm.block("again", text=f"Policy:  {REFUNDS}  (again)")
    first, second = _blocks(tel)
    assert first[S.BLOCK_SOURCE_ITEM_REFS] == ("mcp_resource:1",)
    assert second[S.BLOCK_SOURCE_ITEM_REFS] == ("mcp_resource:1",)
    (bundle,) = tel.bundles()
    assert "not_injected_item_refs" not in bundle["context_selections"][0]


def test_a_lossy_rebuild_judges_nothing(plain: CapturedTelemetry) -> None:
    tel = plain
    with tel.agent_context.envelope() as env:
        with env.selection() as sel:
            sel.selected(doc("refunds", REFUNDS))
        with env.assembly() as asm:
            asm.block("prompt", text="no document here, only a question")
    views = [v for v in tel.views() if v.name != S.SPAN_SELECTION]
    from otel_agent_context.rebuild import rebuild_envelope

    complete = rebuild_envelope(tel.views())
    assert complete["context_selections"][0]["not_injected_item_refs"] == ["refunds"]
    # the selection span lost: nothing selected to judge; a block span lost: no judging
    lost_assembly = rebuild_envelope([v for v in tel.views()
                                      if v.name != S.SPAN_ASSEMBLY])
    assert lost_assembly["rebuild"]["partial_reasons"] == ["missing_spans"]
    assert "not_injected_item_refs" not in lost_assembly["context_selections"][0]
    assert "context_selections" not in rebuild_envelope(views)
    timed_out = rebuild_envelope(tel.views(), partial_reasons=["timeout"])
    assert "not_injected_item_refs" not in timed_out["context_selections"][0]


def test_links_are_bounded_and_cached() -> None:
    links = Links()
    for i in range(MAX_ITEMS + 10):
        links.selected(f"d{i}", f"document number {i:04d} with enough words in it")
    text = " ".join(f"document number {i:04d} with enough words in it"
                    for i in range(MAX_ITEMS + 10))
    (found,) = links.sources([("b", "digest-1", text)])  # type: ignore[misc]
    assert len(found) == MAX_ITEMS  # items past the bound are not compared
    # the same block again: the cached result (same digest, same items)
    assert links.sources([("b", "digest-1", "different text, same digest")]) == [found]
    links.omitted("d0", selected=False)  # the items changed: searched again
    (again,) = links.sources([("b", "digest-1", text)])  # type: ignore[misc]
    assert "d0" not in again and len(again) == MAX_ITEMS - 1
    assert Links().sources([("b", None, text)]) is None  # nothing to compare: None


def _reference(items: dict[str, str], text: str) -> tuple[str, ...]:
    """What a block holds by the definition: every item whose normalised text is in the
    block's normalised text (an item shorter than MIN_CHARS only when it is the whole)."""
    block = " ".join(text.split())
    found = []
    for item_id, item_text in items.items():
        needle = " ".join(item_text.split())
        if needle and (needle == block if len(needle) < MIN_CHARS else needle in block):
            found.append(item_id)
    return tuple(found)


def test_a_block_is_searched_as_it_is_first_and_normalised_only_when_that_can_differ() -> None:
    # the item's words are in the block, but across a line break and a double space: found
    # only once the block is normalised; a block shorter than the item is never a source
    links = Links()
    links.selected("refunds", REFUNDS)
    links.selected("shipping", SHIPPING)
    spread = "Policy:\n" + REFUNDS.replace(" within ", "\n within  ") + "\n\nThanks."
    verbatim = f"Context: {SHIPPING} and more."
    short = "Refunds are issued."
    assert links.sources([("a", None, spread), ("b", None, verbatim), ("c", None, short),
                          ("d", None, SHIPPING + " " + REFUNDS)]) == [
        ("refunds",), ("shipping",), (), ("refunds", "shipping")]


def test_block_sources_match_the_definition_for_any_whitespace() -> None:
    import random

    rnd = random.Random(12)
    words = ["refund", "returns", "ship", "a", "the", "packaging", "days", "ünï", "x", "yes"]
    spaces = [" ", "  ", "\n", "\t", " \n ", "\u00a0", "\x1c"]

    def text(n: int) -> str:
        out = "".join(rnd.choice(words) + (rnd.choice(spaces) if rnd.random() < 0.3 else " ")
                      for _ in range(n))
        return (rnd.choice(spaces) + out) if rnd.random() < 0.3 else out

    for _ in range(400):
        items = {f"i{j}": text(rnd.randint(1, 12)) for j in range(rnd.randint(1, 5))}
        blocks = []
        for b in range(rnd.randint(1, 5)):
            parts = [text(rnd.randint(0, 6))]
            for item_text in items.values():
                if rnd.random() < 0.4:  # as it is, or with its whitespace changed
                    parts.append(item_text if rnd.random() < 0.5 else " ".join(
                        item_text.split()).replace(" ", rnd.choice(spaces)))
                    parts.append(text(rnd.randint(0, 3)))
            blocks.append((f"b{b}", None, "".join(parts)))
        if rnd.random() < 0.2:  # a short item: a block that is its whole text
            items["short"] = "yes"
            blocks.append(("whole", None, " yes\n"))
        links = Links()
        for item_id, item_text in items.items():
            links.selected(item_id, item_text)
        assert links.sources(blocks) == [_reference(items, t) for _, _, t in blocks]
