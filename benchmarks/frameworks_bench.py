"""Cost per agent turn of each framework integration, ours against the official GenAI
instrumentors and the peers, in the same rounds.

    python benchmarks/frameworks_bench.py [--rounds 5] [--calls 40] [--warmup 8]
        [--frameworks NAME,...] [--configs NAME,...] [--json FILE]

Agents written the way each framework's docs write them, offline against the bundled
loopback stub (``otel_agent_context.instrumentation._stub``), which runs in a process of its
own pinned to another core than the benchmark:

- **LangChain** (``langchain`` 1.x, ``langchain-openai``): an agent turn of ``create_agent``
  with ``ChatOpenAI`` (Responses API) and one tool: the model asks for the tool, the tool
  runs, the model answers (two model calls); and a retrieval chain (a retriever over an
  in-memory vector store, a prompt, ``ChatOpenAI`` on chat completions, an output parser).
- **OpenAI Agents SDK** (``openai-agents``): ``Runner.run_sync`` of an ``Agent`` with one
  ``function_tool`` (two model calls). The SDK's own tracing stays on with its processors
  replaced by none (``set_trace_processors([])``, no platform export), so the instrumentors
  that hook it (the official one, OpenInference, OpenLLMetry) see the run.
- **MCP** (``mcp`` 2.x client, as the MCP Python SDK's docs write one): within one
  ``ClientSession`` already initialized over stdio with a server in another process (the
  server of ``examples/mcp_client_app.py``, not counted), a turn reads a resource, fetches
  a prompt, calls a tool, then makes one ``AsyncOpenAI`` chat call with what it got (as the
  example does, without its application envelope: ours then opens an implicit turn
  envelope per MCP call and per model call). There is no official OpenTelemetry GenAI MCP
  instrumentor to set beside ours: ``official GenAI`` here is the official OpenAI
  instrumentor alone; MCP has no ``official (framework)`` configuration, and OpenInference's
  and OpenLLMetry's MCP packages are not measured.

Configurations, each with the same SDK ``TracerProvider`` (a ``SimpleSpanProcessor`` into an
``InMemorySpanExporter``: every span's cost, export included, lands on the calling thread
alike), no meter provider, content capture off in each one's own switch:

- ``uninstrumented``: each process's own baseline, below;
- ``official (framework)``: ``opentelemetry-instrumentation-genai-langchain`` /
  ``-openai-agents`` alone;
- ``official GenAI``: that plus ``opentelemetry-instrumentation-genai-openai`` (what
  ``opentelemetry-instrument`` loads with both installed; the Agents SDK one leaves the model
  calls' spans to the OpenAI one);
- ``OpenInference``, ``OpenLLMetry``: their LangChain / OpenAI Agents instrumentors;
- ``ours``: our framework instrumentor and our OpenAI one (what ``instrument()`` turns on);
- ``ours + official``: ours and ``official GenAI`` together (ours outermost).

One process per configuration and round, the order rotating round by round (instrumentors
patch globally and not all uninstrument cleanly). Within a process every scenario of its
framework is timed uninstrumented (its own baseline) and instrumented in four alternating
blocks (base, instrumented, instrumented, base: a drift within the process falls on both
alike), the agents built again after each switch; a configuration whose uninstrument leaves
turns recorded is timed baseline first, then instrumented (``--sequential`` asks for that
order everywhere, the method of the runs before); each phase warms up, then times turn by
turn: wall (``perf_counter_ns``) and the calling thread's CPU (``thread_time_ns``). "Added"
is, per round, the instrumented median minus the same process's uninstrumented median; the
tables give the median over rounds and the p25-p75. The official framework instrumentors and
the peers are the ``bench`` extra (``pip install -e '.[bench]'``); one not installed is
reported as missing, not timed. Results: stdout as Markdown (benchmarks/frameworks.md
records runs), ``--json`` for the raw summary. """

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _rounds import (  # noqa: E402 - shared with instrumentation_bench.py
    _CORES,
    NO_CONTENT,
    _machine,
    _quantiles,
    _Remote,
    _time,
    _version,
    alternate_phases,
    phases_line,
    summarize,
    tables,
    time_phase,
)
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter,
)

QUESTION = 'Where is order 1234? [call:order_status {"order": 1234}]'
INSTRUCTIONS = "You are ACME's support agent. Help customers with their orders."
KNOWLEDGE = [
    ("Refunds are issued within 14 days of receiving the item.", "kb/refunds.md"),
    ("Standard shipping takes 3 business days; express takes one.", "kb/shipping.md"),
    ("Orders can be cancelled until they ship.", "kb/cancel.md"),
    ("Our office is in Lisbon and opens at nine.", "kb/about.md"),
    ("Damaged items are replaced free of charge.", "kb/damage.md"),
    ("Gift cards never expire.", "kb/giftcards.md"),
]


# -- the agents, as each framework's docs write them -----------------------------------------


def langchain_scenarios(openai_base_url: str) -> dict[str, Callable[[], Any]]:
    from langchain.agents import create_agent
    from langchain_core.documents import Document
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.messages import HumanMessage
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.runnables import RunnablePassthrough
    from langchain_core.tools import tool
    from langchain_core.vectorstores import InMemoryVectorStore
    from langchain_openai import ChatOpenAI

    @tool
    def order_status(order: int) -> str:
        """Where an order is."""
        return f"Order {order} shipped with DHL yesterday."

    agent = create_agent(
        model=ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url, api_key="sk-bench",
                         max_retries=0, use_responses_api=True),
        tools=[order_status], system_prompt=INSTRUCTIONS, name="support_agent")

    store = InMemoryVectorStore(DeterministicFakeEmbedding(size=64))
    store.add_documents([Document(text, metadata={"source": src}, id=src)
                         for text, src in KNOWLEDGE])
    retriever = store.as_retriever(search_kwargs={"k": 3})
    prompt = ChatPromptTemplate.from_messages([
        ("system", INSTRUCTIONS + " Answer from these notes:\n{context}"),
        ("human", "{question}")])

    def notes(docs: list[Any]) -> str:
        return "\n".join(f"[{d.metadata['source']}] {d.page_content}" for d in docs)

    rag = ({"context": retriever | notes, "question": RunnablePassthrough()} | prompt
           | ChatOpenAI(model="gpt-4o-mini", base_url=openai_base_url, api_key="sk-bench",
                        max_retries=0)
           | StrOutputParser())

    def agent_turn() -> Any:
        return agent.invoke({"messages": [HumanMessage(QUESTION)]})

    def rag_turn() -> Any:
        return rag.invoke("How long do refunds take?")

    return {"langchain create_agent + tool": agent_turn,
            "langchain retrieval chain": rag_turn}


def openai_agents_scenarios(openai_base_url: str) -> dict[str, Callable[[], Any]]:
    from agents import Agent, OpenAIResponsesModel, Runner, function_tool
    from openai import AsyncOpenAI

    @function_tool
    def order_status(order: int) -> str:
        """Where an order is."""
        return f"Order {order} shipped with DHL yesterday."

    client = AsyncOpenAI(base_url=openai_base_url, api_key="sk-bench", max_retries=0)
    agent = Agent(name="Support agent", instructions=INSTRUCTIONS, tools=[order_status],
                  model=OpenAIResponsesModel(model="gpt-4o-mini", openai_client=client))

    def turn() -> Any:
        return Runner.run_sync(agent, QUESTION)

    return {"openai-agents Runner.run_sync + tool": turn}


MCP_URI = "docs://policies/refunds"
#: the MCP example's own server (a resource, a prompt, a tool), started as a stdio server
MCP_SERVER = Path(__file__).resolve().parents[1] / "examples" / "mcp_client_app.py"


class _MCPSession:
    """One MCP client session over stdio, initialized and kept open across turns: an event
    loop of its own on the calling thread holds the session's task; each turn runs on it."""

    def __init__(self) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        self.loop = asyncio.new_event_loop()
        self._stop = asyncio.Event()
        ready: asyncio.Future[Any] = self.loop.create_future()
        params = StdioServerParameters(command=sys.executable,
                                       args=[str(MCP_SERVER), "--server"])

        async def hold() -> None:
            async with stdio_client(params) as (read, write), \
                    ClientSession(read, write) as session:
                await session.initialize()
                ready.set_result(session)
                await self._stop.wait()

        self._task = self.loop.create_task(hold())
        self.loop.run_until_complete(asyncio.wait([ready, self._task],
                                                  return_when=asyncio.FIRST_COMPLETED))
        if self._task.done():
            self._task.result()  # the session failed to start: raise its error
        self.session = ready.result()

    def close(self) -> None:
        self._stop.set()
        self.loop.run_until_complete(self._task)
        self.loop.close()


_mcp_open: list[_MCPSession] = []


def _mcp_close() -> None:
    while _mcp_open:
        _mcp_open.pop().close()


atexit.register(_mcp_close)


def mcp_scenarios(openai_base_url: str) -> dict[str, Callable[[], Any]]:
    from openai import AsyncOpenAI

    # one session per process, opened at the first build and kept across the switches (the
    # MCP instrumentor patches the session's class: a session opened before it is seen);
    # the server starts once, outside the turns. The OpenAI client is built again each time.
    if not _mcp_open:
        _mcp_open.append(_MCPSession())
    holder = _mcp_open[0]
    session = holder.session
    client = AsyncOpenAI(base_url=openai_base_url, api_key="sk-bench", max_retries=0)

    async def turn() -> Any:
        policy = (await session.read_resource(MCP_URI)).contents[0].text
        prompt = await session.get_prompt("answer_question",
                                          {"question": "Can I return order 1234?"})
        status = await session.call_tool("order_status", {"order": 1234})
        return await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "system", "content": INSTRUCTIONS + "\n" + policy},
                      {"role": "user", "content": prompt.messages[0].content.text},
                      {"role": "user", "content": status.content[0].text}])

    def mcp_turn() -> Any:
        return holder.loop.run_until_complete(turn())

    return {"mcp resource + prompt + tool, chat call": mcp_turn}


# -- the configurations -------------------------------------------------------------------


def _genai_openai() -> Any:
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


def _ours_openai() -> Any:
    from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

    return OpenAIContextInstrumentor()


def _lc_official() -> Any:
    from opentelemetry.instrumentation.genai.langchain import LangChainInstrumentor

    return LangChainInstrumentor()


def _lc_openinference() -> Any:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    return LangChainInstrumentor()


def _lc_openllmetry() -> Any:
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    return LangchainInstrumentor()


def _lc_ours() -> Any:
    from otel_agent_context.instrumentation.langchain import LangChainContextInstrumentor

    return LangChainContextInstrumentor()


def _oa_official() -> Any:
    from opentelemetry.instrumentation.genai.openai_agents import OpenAIAgentsInstrumentor

    return OpenAIAgentsInstrumentor()


def _oa_openinference() -> Any:
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    return OpenAIAgentsInstrumentor()


def _oa_openllmetry() -> Any:
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    return OpenAIAgentsInstrumentor()


def _oa_ours() -> Any:
    from otel_agent_context.instrumentation.openai_agents import (
        OpenAIAgentsContextInstrumentor,
    )

    return OpenAIAgentsContextInstrumentor()


def _mcp_ours() -> Any:
    from otel_agent_context.instrumentation.mcp import MCPContextInstrumentor

    return MCPContextInstrumentor()


CONFIG_NAMES = ("official (framework)", "official GenAI", "OpenInference", "OpenLLMetry",
                "ours", "ours + official")


def _configs(framework: Callable[[], Any], peers: tuple[Callable[[], Any], ...]
             ) -> dict[str, Callable[[], list[Any]]]:
    """configuration -> instrumentors to turn on, in order (the last runs outermost)."""
    official, ours, openinference, openllmetry = framework, *peers
    return {
        "official (framework)": lambda: [official()],
        "official GenAI": lambda: [_genai_openai(), official()],
        "OpenInference": lambda: [openinference()],
        "OpenLLMetry": lambda: [openllmetry()],
        "ours": lambda: [_ours_openai(), ours()],
        "ours + official": lambda: [_genai_openai(), official(), _ours_openai(), ours()],
    }


#: framework -> (scenario builder, configurations, distributions each configuration needs
#: beyond the package and its test extra)
FRAMEWORKS: dict[str, tuple[Callable[[str], dict[str, Callable[[], Any]]],
                            dict[str, Callable[[], list[Any]]], dict[str, tuple[str, ...]]]] = {
    "langchain": (
        langchain_scenarios,
        _configs(_lc_official, (_lc_ours, _lc_openinference, _lc_openllmetry)),
        {"official (framework)": ("opentelemetry-instrumentation-genai-langchain",),
         "official GenAI": ("opentelemetry-instrumentation-genai-langchain",
                            "opentelemetry-instrumentation-genai-openai"),
         "OpenInference": ("openinference-instrumentation-langchain",),
         "OpenLLMetry": ("opentelemetry-instrumentation-langchain",),
         "ours + official": ("opentelemetry-instrumentation-genai-langchain",
                             "opentelemetry-instrumentation-genai-openai")}),
    "openai-agents": (
        openai_agents_scenarios,
        _configs(_oa_official, (_oa_ours, _oa_openinference, _oa_openllmetry)),
        {"official (framework)": ("opentelemetry-instrumentation-genai-openai-agents",),
         "official GenAI": ("opentelemetry-instrumentation-genai-openai-agents",
                            "opentelemetry-instrumentation-genai-openai"),
         "OpenInference": ("openinference-instrumentation-openai-agents",),
         "OpenLLMetry": ("opentelemetry-instrumentation-openai-agents",),
         "ours + official": ("opentelemetry-instrumentation-genai-openai-agents",
                             "opentelemetry-instrumentation-genai-openai")}),
    # no official MCP instrumentor: the official OpenAI one alone, and with ours
    "mcp": (
        mcp_scenarios,
        {"official GenAI": lambda: [_genai_openai()],
         "ours": lambda: [_ours_openai(), _mcp_ours()],
         "ours + official": lambda: [_genai_openai(), _ours_openai(), _mcp_ours()]},
        {"official GenAI": ("opentelemetry-instrumentation-genai-openai",),
         "ours + official": ("opentelemetry-instrumentation-genai-openai",)}),
}
SCENARIOS = {"langchain": ("langchain create_agent + tool", "langchain retrieval chain"),
             "openai-agents": ("openai-agents Runner.run_sync + tool",),
             "mcp": ("mcp resource + prompt + tool, chat call",)}


def has(framework: str, config: str) -> bool:
    """Whether ``framework`` has ``config`` at all (MCP has no official instrumentor)."""
    return config in FRAMEWORKS[framework][1]


def missing(framework: str, config: str) -> list[str]:
    return [d for d in FRAMEWORKS[framework][2].get(config, ()) if _version(d) is None]


# -- one configuration of one framework, in its own process --------------------------------


def _prepare(framework: str) -> None:
    """Once per process, before anything is built or instrumented."""
    if framework == "openai-agents":
        from agents import set_trace_processors

        # the SDK's tracing on, its platform exporter replaced by nothing (no key, offline);
        # the instrumentors that hook the SDK's tracing add their processor to it
        set_trace_processors([])


def run_child(framework: str, config: str, url: str, calls: int, warmup: int,
              alternate: bool = True) -> dict[str, Any]:
    """Time every scenario of ``framework`` uninstrumented and under ``config``, in
    alternating blocks (or one after the other, for a configuration whose uninstrument
    leaves turns recorded): per turn wall and CPU nanoseconds of each phase, and spans a
    turn."""
    build, configs, _ = FRAMEWORKS[framework]
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _prepare(framework)
    instrumentors = configs[config]()
    out: dict[str, Any] = {name: {} for name in SCENARIOS[framework]}

    def on() -> None:
        for inst in instrumentors:
            inst.instrument(tracer_provider=provider)

    def off() -> None:
        for inst in reversed(instrumentors):
            inst.uninstrument()

    # the agents are built after each switch, as an application builds them at start-up:
    # a client's raw-response wrappers (which ChatOpenAI calls through) bind the client's
    # methods once, so a client used before instrumenting stays unseen by every OpenAI
    # instrumentor (ours and the official one alike)
    if alternate and alternate_phases(on, off, lambda: build(f"{url}/v1"), exporter, out,
                                      calls, warmup):
        provider.shutdown()
        return out
    for phase in ("base", "instrumented"):
        if phase == "instrumented":
            on()
        wanted = build(f"{url}/v1")
        for name, fn in wanted.items():
            time_phase(fn, warmup, calls, exporter, out[name], phase)
    off()
    for name in out:
        out[name]["alternated"] = False
    provider.shutdown()
    return out


def _spawn(framework: str, config: str, url: str, args: argparse.Namespace
           ) -> dict[str, Any]:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", config,
           "--framework", framework, "--stub-url", url, "--calls", str(args.calls),
           "--warmup", str(args.warmup)] + (["--sequential"] if args.sequential else [])
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env.update(NO_CONTENT)
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{framework} configuration {config!r} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# -- where our time goes -------------------------------------------------------------------


#: where an instrumentation's code lives (with the SDK and the API it calls)
_INSTRUMENTATION = ("/otel_agent_context/", "/opentelemetry/", "/openinference/", "/wrapt/")


def _entries(frame: Any, into: dict[str, float], owner: str | None = None,
             below: bool = False) -> None:
    """The time spent in instrumentation code, by its entry point and the function that
    entry called: every frame's own time goes to the instrumentation entry it runs under,
    unless the instrumentation called back into the library or the application in between
    (the wrapped call itself, which is the uninstrumented work); the standard library goes
    to whoever called it."""
    path = (frame.file_path or "").replace("\\", "/")
    entry = False
    if any(p in path for p in _INSTRUMENTATION):
        if owner is None:
            owner, entry = f"{frame.function} ({path.rsplit('/', 2)[-2]})", True
        elif below:  # a function the entry called
            owner = f"{owner.split(' → ')[0]} → {frame.function}"
    elif "site-packages/" in path or "/benchmarks/" in path:
        owner = None  # back in the framework, the client or the agent
    if owner is not None:
        own = frame.time - sum(child.time for child in frame.children)
        into[owner] = into.get(owner, 0.0) + own
    for child in frame.children:
        _entries(child, into, owner, entry)


def profile(framework: str, config: str, url: str, turns: int, warmup: int) -> str:
    """A sampling profile (pyinstrument, 0.2 ms, wall time) of ``turns`` turns of each
    scenario under ``config``: the share of a turn spent in the instrumentation's own code
    and what it calls (the SDK, util-genai, the standard library), per entry point, the
    wrapped calls excluded."""
    from pyinstrument import Profiler

    build, configs, _ = FRAMEWORKS[framework]
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(InMemorySpanExporter()))
    _prepare(framework)
    for inst in configs[config]():
        inst.instrument(tracer_provider=provider)
    lines = []
    for name, fn in build(f"{url}/v1").items():
        _time(fn, warmup)
        profiler = Profiler(interval=0.0002, async_mode="disabled")
        profiler.start()
        _time(fn, turns)
        session = profiler.stop()
        root = session.root_frame()
        total = root.time if root is not None else 0.0
        entries: dict[str, float] = {}
        if root is not None:
            _entries(root, entries)
        inside = sum(entries.values())
        lines += [f"#### {name}: {config}, {turns} turns, {total / turns * 1e3:.1f} ms a turn "
                  f"sampled; inside the instrumentation {inside / total:.1%}", "",
                  "| entry into the instrumentation | share of the turn | ms a turn |",
                  "|---|---:|---:|"]
        for key, t in sorted(entries.items(), key=lambda kv: -kv[1])[:15]:
            lines.append(f"| {key} | {t / total:.1%} | {t / turns * 1e3:.2f} |")
        lines.append("")
    return "\n".join(lines)


# -- the report ---------------------------------------------------------------------------


def report(summary: dict[str, dict[str, dict[str, Any]]], configs: list[str]) -> str:
    lines = tables(summary, configs, unit="turn")
    lines += goals(summary)
    return "\n".join(lines)


def goals(summary: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The goal on added caller CPU (medians): at most 1.5x what the official instrumentor
    adds, for ours and for ours composed with the official one; against the official
    framework instrumentor with the official OpenAI one (the same reach as ours) and
    against the framework one alone."""
    lines = ["### Goal: at most 1.5× the official instrumentor (added caller CPU, medians)", "",
             "| scenario | ours µs | ours + official µs | official GenAI µs "
             "| ours ÷ official GenAI | ours + official ÷ official GenAI "
             "| official (framework) µs | ours ÷ official (framework) "
             "| ours + official ÷ official (framework) |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]

    def added(by_config: dict[str, dict[str, Any]], config: str) -> float | None:
        entry = by_config.get(config)
        return entry["cpu_added"][1] if entry else None

    def ratio(a: float | None, b: float | None) -> str:
        if a is None or b is None:
            return "–"
        if b <= 0:
            return "n/a (official ≤ 0)"
        r = a / b
        return f"{r:.2f} {'met' if r <= 1.5 else 'MISSED'}"

    def num(a: float | None) -> str:
        return "–" if a is None else f"{a:.0f}"

    for scenario, by_config in summary.items():
        ours, both, official, framework = (
            added(by_config, c) for c in ("ours", "ours + official", "official GenAI",
                                          "official (framework)"))
        lines.append(f"| {scenario} | {num(ours)} | {num(both)} | {num(official)} | "
                     f"{ratio(ours, official)} | {ratio(both, official)} | {num(framework)} | "
                     f"{ratio(ours, framework)} | {ratio(both, framework)} |")
    lines.append("")
    return lines


VERSIONED = ("langchain", "langchain-core", "langchain-openai", "langgraph", "openai-agents",
             "mcp", "openai", "opentelemetry-sdk", "opentelemetry-util-genai",
             "opentelemetry-instrumentation-genai-openai",
             "opentelemetry-instrumentation-genai-langchain",
             "opentelemetry-instrumentation-genai-openai-agents",
             "openinference-instrumentation-langchain",
             "openinference-instrumentation-openai-agents",
             "opentelemetry-instrumentation-langchain",
             "opentelemetry-instrumentation-openai-agents", "otel-agent-context")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds; each runs every configuration once, in its own process")
    parser.add_argument("--calls", type=int, default=40,
                        help="timed turns per scenario, configuration and round")
    parser.add_argument("--warmup", type=int, default=8,
                        help="untimed turns per scenario and phase before the timed ones")
    parser.add_argument("--frameworks", help="comma-separated subset of: "
                        + ", ".join(FRAMEWORKS))
    parser.add_argument("--configs", help="comma-separated subset of: "
                        + ", ".join(CONFIG_NAMES))
    parser.add_argument("--json", metavar="FILE", help="also write the summary as JSON")
    parser.add_argument("--profile", metavar="CONFIG",
                        help="instead: profile --calls turns of each scenario under CONFIG "
                             "in this process (pyinstrument), per framework")
    parser.add_argument("--sequential", action="store_true",
                        help="time each process's uninstrumented phase first, then the "
                             "instrumented one (the method of the runs before alternating "
                             "blocks), instead of in alternating blocks")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--framework", help=argparse.SUPPRESS)
    parser.add_argument("--stub-url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(run_child(args.framework, args.child, args.stub_url, args.calls,
                                   args.warmup, alternate=not args.sequential)))
        return
    frameworks = args.frameworks.split(",") if args.frameworks else list(FRAMEWORKS)
    if args.profile:
        with _Remote() as stub:
            for f in frameworks:
                print(profile(f, args.profile, stub.url, args.calls, args.warmup))
        return
    wanted = args.configs.split(",") if args.configs else list(CONFIG_NAMES)
    unknown = (set(frameworks) - set(FRAMEWORKS)) | (
        set(wanted) - set(CONFIG_NAMES) - {"uninstrumented"})
    if unknown:
        raise SystemExit(f"unknown frameworks or configurations: {sorted(unknown)}")
    wanted = [c for c in CONFIG_NAMES if c in wanted]  # every process has the baseline
    jobs = [(f, c) for f in frameworks for c in wanted if has(f, c)]
    absent = {(f, c): m for f, c in jobs if (m := missing(f, c))}
    jobs = [j for j in jobs if j not in absent]
    if not jobs:
        raise SystemExit("nothing to time: " + "; ".join(
            f"{f} {c}: {', '.join(m)}" for (f, c), m in absent.items()))
    os.sched_setaffinity(0, _CORES[:1])  # the children inherit the benchmark's core
    rounds: dict[str, list[dict[str, Any]]] = {
        s: [] for f in frameworks for s in SCENARIOS[f]}
    started = time.monotonic()
    loads = [os.getloadavg()[0]]
    with _Remote() as stub:
        for r in range(args.rounds):
            order = jobs[r % len(jobs):] + jobs[:r % len(jobs)]
            this_round = {job: _spawn(*job, stub.url, args) for job in order}
            for f in frameworks:
                for scenario in SCENARIOS[f]:
                    rounds[scenario].append({c: this_round[(g, c)][scenario]
                                             for g, c in order if g == f})
            loads.append(os.getloadavg()[0])
    summary = summarize(rounds)
    versions = {d: _version(d) for d in VERSIONED}
    print(f"Machine: {_machine()}; Python {platform.python_version()}.")
    print("Versions: " + ", ".join(f"{d} {v}" for d, v in versions.items() if v) + ".")
    low, mid, high = _quantiles(loads, scale=1.0)
    print(f"{args.rounds} rounds x {args.calls} turns per scenario and configuration "
          f"({args.warmup} warm-up turns per phase), traces, content capture off; "
          f"{time.monotonic() - started:.0f} s; load average (1 min) over the rounds "
          f"{min(loads):.1f}–{max(loads):.1f} (median {mid:.1f}).")
    for (f, c), dists in absent.items():
        print(f"Not installed, not timed: {f} {c} ({', '.join(dists)}; "
              "pip install -e '.[bench]').")
    print(phases_line(rounds, args.sequential))
    print()
    timed = [c for c in wanted if any((f, c) in jobs for f in frameworks)]
    print(report(summary, timed))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"machine": _machine(), "python": platform.python_version(), "versions": versions,
             "rounds": args.rounds, "calls": args.calls, "loads": loads,
             "missing": {f"{f} {c}": m for (f, c), m in absent.items()},
             "summary": summary}, indent=1))


if __name__ == "__main__":
    main()
