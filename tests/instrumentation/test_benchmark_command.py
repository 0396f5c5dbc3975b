"""The documented instrumentation benchmark runs and reports every scenario and mode.

Only that it works: the numbers themselves are recorded in benchmarks/instrumentation.md,
never asserted here (a timed assertion on a shared machine measures the machine)."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import wrapt
from llm_helpers import assert_added_tables
from llm_helpers import markdown_table as _table

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "instrumentation_bench.py"

SCENARIOS = ("openai chat.completions", "openai chat.completions stream",
             "openai chat.completions async", "openai responses", "anthropic messages",
             "anthropic messages.stream", "openai chat.completions new turn",
             "anthropic messages new turn", "openai chat.completions tools",
             "anthropic messages tools", "openai chat.completions agent loop",
             "anthropic messages agent loop", "openai responses agent loop")
CONFIGS = ("official GenAI", "OpenInference", "OpenLLMetry", "ours", "ours + official",
           "official + ours", "bare span")
#: ours and the official instrumentors are always installed with the test extra; the
#: peers come with the bench extra, and a peer that is not installed is named, not timed
ALWAYS = ("official GenAI", "ours", "ours + official", "official + ours", "bare span")


def test_benchmark_reports_every_scenario_and_configuration(tmp_path: Path) -> None:
    out = tmp_path / "summary.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--rounds", "1", "--calls", "3",
                           "--warmup", "1", "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Machine: ") and "cores" in lines[0] and "Python 3." in lines[0]
    assert lines[1].startswith("Versions: ") and "openai " in lines[1]
    missing = {line.split(": ", 1)[1].split(" (")[0] for line in lines
               if line.startswith("Not installed, not timed: ")}
    assert not missing & set(ALWAYS)
    timed = [c for c in CONFIGS if c not in missing]
    assert_added_tables(lines, SCENARIOS, timed)
    _, recorded = _table(lines, "Recorded per call")
    assert list(recorded) == list(SCENARIOS)
    ours, official = timed.index("ours"), timed.index("official GenAI")
    for cells in recorded.values():
        spans, events, attributes = (int(n) for n in cells[ours].split(" / "))
        # it did record: the folded form, one span a call with no events (a compaction
        # aside) and its budget, window and assembly as attributes, more than the GenAI ones
        assert spans >= 1 and attributes > spans
        assert attributes > int(cells[official].split(" / ")[2])
    header, goals = _table(lines, "Goals")
    assert list(goals) == list(SCENARIOS)
    summary = json.loads(out.read_text())
    assert set(summary["summary"]) == set(SCENARIOS)
    assert summary["summary"]["anthropic messages"]["ours"]["calls"] == 3


def test_folded_stages_probe_reports_its_three_scenarios() -> None:
    probe = BENCH.parent / "probes" / "folded_stages.py"
    proc = subprocess.run([sys.executable, str(probe), "--rounds", "1"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines()
            if line.startswith("| openai") or line.startswith("| anthropic")]
    assert [r.split("|")[1].strip() for r in rows] == [
        "openai chat.completions", "openai responses", "anthropic messages"]
    assert all(len(re.findall(r"-?\d+ \(-?\d+\.\d%\)", r)) == 4 for r in rows)


#: a paired cell: median (p25–p75) met/MISSED, or "–" when no round had a ratio, and then
#: how many rounds were left out for an official phase that added nothing measurable
_PAIRED_CELL = (r"(-?\d+\.\d\d \(-?\d+\.\d\d–-?\d+\.\d\d\) (met|MISSED)|–)"
                r"( \(\d rounds? left out: the official's added CPU ≤ 0\))?")


def _timed(base: list[int], official: list[int], composed: list[int]) -> dict[str, Any]:
    """One composed process's round as the child reports it: CPU and wall per call (ns)."""
    def phase(ns: list[int]) -> dict[str, list[int]]:
        return {"cpu": ns, "wall": ns}
    return {"spans": 1, "events": 0, "attributes": 20, "attributes_official": 10,
            "base": phase(base), "official": phase(official), "instrumented": phase(composed)}


def test_a_round_where_the_official_added_nothing_is_left_out_of_the_ratio() -> None:
    """A round whose official phase is at or under the baseline (noise on a short run) has
    no ratio: it is left out and counted, not turned into an infinite "ratio" that breaks
    the median and the report."""
    bench = _bench_module()
    rounds = {"anthropic messages": [
        {"ours + official": _timed([1000_000] * 3, [1100_000] * 3, [1150_000] * 3)},
        {"ours + official": _timed([1000_000] * 3, [990_000] * 3, [1140_000] * 3)},
        {"ours + official": _timed([1000_000] * 3, [1050_000] * 3, [1100_000] * 3)}]}
    entry = bench.summarize(rounds)["anthropic messages"]["ours + official"]
    assert entry["cpu_ratio_to_official"] == (1.625, 1.75, 1.875)  # 150/100 and 100/50
    assert entry["cpu_ratio_to_official_left_out"] == 1
    lines = bench.paired(bench.summarize(rounds))
    _, rows = _table(lines, "Composed ÷ official alone in the same process")
    assert rows["anthropic messages"] == [
        "1.75 (1.62–1.88) MISSED (1 round left out: the official's added CPU ≤ 0)", "–"]
    assert all(re.fullmatch(_PAIRED_CELL, c) for c in rows["anthropic messages"])
    # no round with a ratio at all
    rounds["anthropic messages"] = rounds["anthropic messages"][1:2] * 2
    entry = bench.summarize(rounds)["anthropic messages"]["ours + official"]
    assert entry["cpu_ratio_to_official"] is None
    assert entry["cpu_ratio_to_official_left_out"] == 2
    _, rows = _table(bench.paired(bench.summarize(rounds)),
                     "Composed ÷ official alone in the same process")
    assert rows["anthropic messages"][0] == (
        "– (2 rounds left out: the official's added CPU ≤ 0)")


def test_paired_composed_ratio_comes_from_the_official_alone_in_the_same_process(
        tmp_path: Path) -> None:
    """``--paired``: the composed processes also time the official instrumentors alone, in
    the same blocks, and the report gives composed ÷ official from each process."""
    out = tmp_path / "summary.json"
    configs = ("official GenAI", "ours + official", "official + ours")
    proc = subprocess.run([sys.executable, str(BENCH), "--rounds", "2", "--calls", "6",
                           "--warmup", "1", "--configs", ",".join(configs),
                           "--scenarios", "anthropic messages", "--paired",
                           "--json", str(out)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    header, rows = _table(lines, "Composed ÷ official alone in the same process")
    assert header == ["scenario", "ours + official ÷ official", "official + ours ÷ official"]
    assert list(rows) == ["anthropic messages"]
    # six calls a block are noise enough that the official's added median may come out at
    # or under the baseline's in a round: that round has no ratio and the cell says so
    assert all(re.fullmatch(_PAIRED_CELL, c) for c in rows["anthropic messages"])
    _, goals = _table(lines, "Goals")
    assert len(goals["anthropic messages"]) == 7  # both composed orders against the official
    by_config = json.loads(out.read_text())["summary"]["anthropic messages"]
    alone = by_config["official GenAI"]["attributes_per_call"]
    for config in configs[1:]:
        entry = by_config[config]
        # the paired phase is the official instrumentor alone: what it records, not ours
        assert entry["attributes_per_call_official"] == alone
        assert entry["attributes_per_call"] > alone
        assert len(entry["cpu_added_official"]) == 3
        ratio, left_out = (entry["cpu_ratio_to_official"],
                           entry["cpu_ratio_to_official_left_out"])
        assert (ratio is None and left_out == 2) or (len(ratio) == 3 and left_out < 2)
    # a configuration that is not composed times no official phase
    assert "cpu_ratio_to_official" not in by_config["official GenAI"]


def _bench_module() -> Any:
    """The benchmark's module, imported as its sibling instrumentation_ir.py does."""
    sys.path.insert(0, str(BENCH.parent))
    try:
        return importlib.import_module("instrumentation_bench")
    finally:
        sys.path.remove(str(BENCH.parent))


class _LeavesItsWrapper:
    """An instrumentor whose ``uninstrument()`` unwraps nothing, as OpenLLMetry's OpenAI
    one (0.62.4) does: the benchmark's off switch must put the method back itself, or its
    "uninstrumented" blocks run the instrumentor's wrapper."""

    calls = 0

    def instrument(self, **kwargs: Any) -> None:
        def counting(wrapped: Any, instance: Any, args: Any, kwargs: Any) -> Any:
            type(self).calls += 1
            return wrapped(*args, **kwargs)
        wrapt.wrap_function_wrapper("openai.resources.chat.completions",
                                    "Completions.create", counting)

    def uninstrument(self, **kwargs: Any) -> None:
        return None


def test_switching_off_puts_back_what_uninstrument_left_wrapped() -> None:
    bench = _bench_module()
    from openai.resources.chat.completions import Completions

    original = vars(Completions)["create"]
    ours = bench.OpenAIContextInstrumentor()
    ours.instrument()  # wrapped before the switches exist: theirs to keep
    try:
        kept = vars(Completions)["create"]
        assert kept is not original
        on, off = bench._switches([_LeavesItsWrapper()], {})
        for _ in range(2):  # every cycle, not only the first
            on()
            assert vars(Completions)["create"].__wrapped__ is kept
            off()
            assert vars(Completions)["create"] is kept
        # one whose uninstrument() puts back a copy of what it found (OTel's unwrap of a
        # bound wrapper): the very object it found is put back
        official = bench._official()[0]
        on, off = bench._switches([official], {})
        for _ in range(2):
            on()
            assert vars(Completions)["create"] is not kept
            off()
            assert vars(Completions)["create"] is kept
    finally:
        ours.uninstrument()
    assert vars(Completions)["create"] is original


def test_each_block_starts_from_the_request_data_as_built() -> None:
    """An instrumentor that edits the application's messages (OpenLLMetry adds ``"type":
    "message"`` to each Responses input message) must not leave the edit to the next
    block's baseline, nor to the Anthropic scenarios' messages."""
    bench = _bench_module()
    assert bench._fresh_requests() is False
    before = json.dumps([bench.HISTORY, bench.ANTHROPIC_MESSAGES, bench.ANTHROPIC_SYSTEM])
    history = bench.HISTORY
    for message in history[1:]:
        message["type"] = "message"
    assert all("type" not in m for m in bench.ANTHROPIC_MESSAGES)
    bench.ANTHROPIC_SYSTEM[0]["cache_control"]["ttl"] = "1h"
    assert bench._fresh_requests() is True
    assert bench.HISTORY is history  # in place: the scenarios read these lists
    assert json.dumps([bench.HISTORY, bench.ANTHROPIC_MESSAGES,
                       bench.ANTHROPIC_SYSTEM]) == before
    assert bench._fresh_requests() is False


def test_without_transport_a_call_returns_its_scenarios_response_and_sends_nothing(
        stub: Any) -> None:
    """``--no-transport``: each scenario's ``create`` returns (a copy with an id of its own
    of) the response the stub gave that scenario, nothing more is sent, and the
    instrumentors wrapping ``create`` afterwards record what they record of a real call."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    bench = _bench_module()
    classes = [getattr(importlib.import_module(m), c) for m, c, _ in bench._REPLAYED]
    saved = [vars(cls)["create"] for cls in classes]
    names = ("openai chat.completions", "openai chat.completions stream",
             "openai chat.completions async", "anthropic messages", "openai responses")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    composed = [*bench._official(), bench.OpenAIContextInstrumentor(),
                bench.AnthropicContextInstrumentor()]

    def keys_of_each_call(fns: dict[str, Any]) -> dict[str, set[str]]:
        for inst in composed:
            inst.instrument(tracer_provider=provider)
        try:
            out = {}
            for name, fn in fns.items():
                fn()  # then a second call: the stub's prompt cache warm, as replayed
                exporter.clear()
                fn()
                (span,) = exporter.get_finished_spans()
                out[name] = set(span.attributes)
            return out
        finally:
            for inst in composed:
                inst.uninstrument()

    try:
        given: dict[str, list[Any]] = {n: [] for n in names}

        def recording(name: str, fn: Any) -> Any:
            def call() -> Any:
                result = fn()
                given[name].append(result)
                return result
            return call

        wanted = {n: recording(n, f) for n, f in bench.scenarios(stub).items() if n in names}
        kept = [n for n in names if n != "openai chat.completions stream"]
        real = keys_of_each_call({n: wanted[n] for n in kept})
        replayed = bench._replayed(wanted)
        # a stream's call returns no response model: not replayed, left out
        assert sorted(replayed) == sorted(kept)
        sent = len(stub.requests)
        for name, fn in replayed.items():
            recorded = given[name][-1]  # the stub's answer to that scenario's last call
            first, again = fn(), fn()
            for response in (first, again):
                assert type(response) is type(recorded)
                assert response.id.startswith(f"{recorded.id}-")
                assert response.model_dump(exclude={"id"}) == \
                    recorded.model_dump(exclude={"id"})
            assert first.id != again.id  # an id of its own each call, as the API gives
        assert len(stub.requests) == sent  # nothing sent after the recording calls
        # the official instrumentors and ours composed record the same attributes of a
        # replayed call as of the call through the stub
        assert keys_of_each_call(replayed) == real
        assert "context.assembly.block_item_ids" in real["openai chat.completions"]
        assert len(stub.requests) == sent
    finally:
        for cls, create in zip(classes, saved, strict=True):
            cls.create = create
