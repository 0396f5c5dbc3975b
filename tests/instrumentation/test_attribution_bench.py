"""The attribution benchmark's parts: samples to owners, shares, the ratio, its child process.

py-spy itself (the ``bench`` extra, and ptrace rights) is not run here: the stacks below are
in its raw form, one line a distinct stack with its count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))
import attribution_bench as ab  # noqa: E402

# a checkout named like the package, in the virtual environment's path too: the package
# is known by its imported directory, not by its name
SITE = "/otel_agent_context/.venv/lib/python3.11/site-packages"
LOOP = f"child ({BENCH_DIR}/attribution_bench.py:120)"
SCEN = f"chat_turn ({BENCH_DIR}/instrumentation_bench.py:281)"
OFFICIAL = f"traced_method ({SITE}/opentelemetry/instrumentation/genai/openai/patch.py:72)"
OURS = f"wrapper ({ab._OURS}instrumentation/_common.py:1818)"
OURS_READ = f"_read_plain ({ab._OURS}instrumentation/_common.py:760)"
OURS_STREAM = f"OurSyncStream.__next__ ({ab._OURS}instrumentation/_common.py:1400)"
DECORATOR = f"wrapper ({SITE}/openai/_utils/_utils.py:298)"
CREATE = f"Completions.create ({SITE}/openai/resources/chat/completions/completions.py:1611)"
SSE = f"Stream.__next__ ({SITE}/openai/_streaming.py:40)"
HTTP = f"send ({SITE}/httpx/_client.py:900)"
SOCKET = "recv_into (/usr/lib/python3.11/socket.py:705)"
SDK = f"set_attributes ({SITE}/opentelemetry/sdk/trace/__init__.py:800)"
GENAI = f"stop ({SITE}/opentelemetry/util/genai/handler.py:200)"


def stack(*frames: str) -> list[str]:
    return list(frames)


@pytest.mark.parametrize(("frames", "expected"), [
    # the client's work under both wrappers is the client's
    (stack(LOOP, SCEN, OFFICIAL, OURS, DECORATOR, CREATE, HTTP), "client"),
    # ours reading the request inside the official wrapper
    (stack(LOOP, SCEN, OFFICIAL, OURS, OURS_READ), "ours"),
    # the SDK and util-genai are the caller's: ours here, the official's there
    (stack(LOOP, SCEN, OFFICIAL, OURS, OURS_READ, SDK), "ours"),
    (stack(LOOP, SCEN, OFFICIAL, GENAI, SDK), "official"),
    # the client's decorator above its method, a stream's reads under our stream wrapper,
    # the standard library under the HTTP stack: the client's
    (stack(LOOP, SCEN, OURS, OFFICIAL, DECORATOR), "client"),
    (stack(LOOP, SCEN, OURS_STREAM, SSE, HTTP, SOCKET), "client"),
    (stack(LOOP, SCEN, OURS_STREAM), "ours"),
    (stack(LOOP, SCEN, SSE), "client"),
    # the benchmark's own code, and the process outside the timed calls
    (stack(LOOP, SCEN), "scenario"),
    (stack(LOOP), None),
    (stack(f"<module> ({BENCH_DIR}/attribution_bench.py:250)"), None),
])
def test_a_sample_goes_to_its_innermost_owner(frames: list[str], expected: str | None) -> None:
    assert ab.owner(frames) == expected


def test_raw_lines_are_counted_by_owner() -> None:
    lines = [
        ";".join(stack(LOOP, SCEN, OFFICIAL, OURS, DECORATOR, CREATE, HTTP)) + " 40\n",
        ";".join(stack(LOOP, SCEN, OFFICIAL, OURS, OURS_READ)) + " 3\n",
        ";".join(stack(LOOP, SCEN, OFFICIAL, OURS, OURS_READ, SDK)) + " 2\n",
        ";".join(stack(LOOP, SCEN, OFFICIAL, GENAI)) + " 4\n",
        ";".join(stack(LOOP, SCEN)) + " 1\n",
        ";".join(stack(LOOP)) + " 7\n",  # outside the calls: not counted
        "a line py-spy does not write\n", "\n",
    ]
    assert ab.count(lines) == {"ours": 5, "official": 4, "client": 40, "scenario": 1}


def test_shares_are_per_client_sample_and_the_ratio_divides_two_processes() -> None:
    official = ab.shares({"ours": 0, "official": 50, "client": 1000, "scenario": 3})
    composed = ab.shares({"ours": 36, "official": 45, "client": 900, "scenario": 3})
    assert official == {"ours": 0.0, "official": 0.05, "instrumentation": 0.05}
    assert composed["instrumentation"] == pytest.approx(0.09)
    assert ab.composed_ratio(composed, official) == pytest.approx(1.8)
    # no client samples, or an official that added none: no ratio, not an infinite one
    none = ab.shares({"ours": 5, "official": 5, "client": 0, "scenario": 0})
    assert none == {"ours": None, "official": None, "instrumentation": None}
    assert ab.composed_ratio(composed, none) is None
    assert ab.composed_ratio(composed, ab.shares(
        {"ours": 0, "official": 0, "client": 10, "scenario": 0})) is None


def test_the_report_gives_medians_of_the_rounds_and_the_ratio_for_composed_ones() -> None:
    def run(ours: int, official: int, client: int, gc_ns: float) -> dict[str, object]:
        return {"counts": {"ours": ours, "official": official, "client": client,
                           "scenario": 0}, "gc_ns": gc_ns, "collections": 0.1, "cpu_ns": 1.0}

    results = {"chat": {
        "official GenAI": [run(0, 50, 1000, 2000), run(0, 60, 1000, 3000)],
        "official + ours": [run(40, 50, 1000, 9000), run(30, 60, 1000, 11000)],
    }}
    results["chat"]["ours + official"] = [run(80, 20, 1000, 9000), run(70, 20, 1000, 9000)]
    lines = ab.report(results).splitlines()
    assert lines[0] == "#### chat"
    official = next(line for line in lines if line.startswith("| official GenAI |"))
    composed = next(line for line in lines if line.startswith("| official + ours |"))
    inner = next(line for line in lines if line.startswith("| ours + official |"))
    # official: shares 0.05 and 0.06, no ratio; the collector 2.0 and 3.0 µs
    assert official.split(" | ")[1:6] == ["0.000", "0.055", "–", "–", "2.5"]
    # composed rounds: (40 + 50) / 50 = 1.8 and (30 + 60) / 60 = 1.5, each against the
    # official process of its own round; in the composed process alone the same here
    assert composed.split(" | ")[1:6] == ["0.035", "0.055", "1.650", "1.650", "10.0"]
    # ours outermost: the official's share in its process is not its whole work
    assert inner.split(" | ")[1:6] == ["0.075", "0.020", "1.750", "–", "9.0"]
    assert composed.endswith("| 40 / 50 / 1000, 30 / 60 / 1000 |")


def test_the_child_times_its_calls_after_the_profiler_is_attached() -> None:
    proc = subprocess.Popen(
        [sys.executable, str(BENCH_DIR / "attribution_bench.py"), "--child", "ours",
         "openai chat.completions new turn", "40", "5"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdin is not None
        assert proc.stdout.readline().strip() == "ready"
        proc.stdin.write("go\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["cpu_ns"] > 0 and result["gc_ns"] >= 0 and result["collections"] >= 0
