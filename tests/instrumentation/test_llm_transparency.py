"""Transparent to the host: with our instrumentors on, the application sees what it saw
without them. The same calls run on the real clients against two fresh stubs (so the
stubs' ids match), once uninstrumented and once instrumented, and are compared: warnings
(category, text, file and line), tracebacks of the clients' exceptions (every frame but
ours), return values and the request bodies the stub received."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import sys
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest
from anthropic._data import DEPRECATED_MODELS
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from stub_server import StubServer

import otel_agent_context
from otel_agent_context import _semconv as S
from otel_agent_context.instrumentation import _frames
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

PACKAGE = str(Path(otel_agent_context.__file__).parent)
DEPRECATED = sorted(DEPRECATED_MODELS)[0]
MESSAGES = [{"role": "user", "content": "where is my order?"}]


# -- instrumentation on and off -----------------------------------------------------------


def _official() -> list[Any]:
    from opentelemetry.instrumentation.genai.anthropic import AnthropicInstrumentor
    from opentelemetry.instrumentation.genai.openai import OpenAIInstrumentor

    return [OpenAIInstrumentor(), AnthropicInstrumentor()]


@contextlib.contextmanager
def instrumented(mode: str) -> Iterator[InMemorySpanExporter]:
    """``none``, ``ours``, ``official``, ``ours+official`` (official outermost),
    ``official+ours`` (ours outermost)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    ours = [OpenAIContextInstrumentor(), AnthropicContextInstrumentor()]
    order = {"none": [], "ours": ours, "official": _official(),
             "ours+official": ours + _official(), "official+ours": _official() + ours}[mode]
    for inst in order:  # the one instrumented last runs outermost
        inst.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        for inst in order:
            inst.uninstrument()
        provider.shutdown()


# -- the application's calls ---------------------------------------------------------------


def _anthropic(stub: StubServer) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="sk-test",
                               max_retries=0)


def create_deprecated(stub: StubServer) -> Any:
    return _anthropic(stub).messages.create(model=DEPRECATED, max_tokens=20,
                                            messages=MESSAGES)


def beta_deprecated(stub: StubServer) -> Any:
    return _anthropic(stub).beta.messages.create(model=DEPRECATED, max_tokens=20,
                                                 messages=MESSAGES)


def stream_deprecated(stub: StubServer) -> Any:
    # the SDK's stream() warns with stacklevel=3 too, one frame less deep than create():
    # uninstrumented the warning names this function's caller
    with _anthropic(stub).messages.stream(model=DEPRECATED, max_tokens=20,
                                          messages=MESSAGES) as stream:
        return stream.get_final_message()


def async_deprecated(stub: StubServer) -> Any:
    async def main() -> Any:
        async with anthropic.AsyncAnthropic(base_url=stub.anthropic_base_url,
                                            api_key="sk-test", max_retries=0) as client:
            return await client.messages.create(model=DEPRECATED, max_tokens=20,
                                                messages=MESSAGES)

    return asyncio.run(main())


WARNING_CALLS = [create_deprecated, beta_deprecated, stream_deprecated, async_deprecated]


def _warnings_of(call: Callable[[StubServer], Any], mode: str
                 ) -> list[tuple[str, str, int, str]]:
    with StubServer() as stub, instrumented(mode), \
            warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        call(stub)
    # (an unclosed socket's ResourceWarning comes whenever the collector runs: not ours)
    return [(w.category.__name__, str(w.message), w.lineno, w.filename) for w in seen
            if not issubclass(w.category, ResourceWarning)]


@pytest.mark.parametrize("call", WARNING_CALLS, ids=lambda c: c.__name__)
def test_client_warnings_name_the_same_line_instrumented(call: Callable[..., Any]) -> None:
    plain = _warnings_of(call, "none")
    assert any(c == "DeprecationWarning" and DEPRECATED in m for c, m, _, _ in plain)
    if call is not async_deprecated:  # (awaited, the SDK's level names the event loop)
        assert all(f == __file__ for *_, f in plain), plain  # this file: the application
    assert _warnings_of(call, "ours") == plain


@pytest.mark.parametrize("order", ["ours+official", "official+ours"])
@pytest.mark.parametrize("call", WARNING_CALLS, ids=lambda c: c.__name__)
def test_composed_with_the_official_instrumentor_we_move_no_warning(
        call: Callable[..., Any], order: str) -> None:
    # the official wrapper's own frame moves the warning; ours, inside or outside it, not
    assert _warnings_of(call, order) == _warnings_of(call, "official")


def test_the_deprecation_warning_shows_under_default_filters() -> None:
    # Python shows a DeprecationWarning by default only where it names __main__'s code: a
    # warning naming our module instead was silently dropped
    script = f"""
import sys, warnings
sys.path.insert(0, {str(Path(__file__).parent)!r})
from stub_server import StubServer
import anthropic
from opentelemetry.sdk.trace import TracerProvider
from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor
AnthropicContextInstrumentor().instrument(tracer_provider=TracerProvider())
with StubServer() as stub:
    client = anthropic.Anthropic(base_url=stub.anthropic_base_url, api_key="k", max_retries=0)
    client.messages.create(model={DEPRECATED!r}, max_tokens=5, messages={MESSAGES!r})
"""
    import subprocess

    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, env={"PATH": "", "NO_PROXY": "127.0.0.1"})
    assert proc.returncode == 0, proc.stderr
    assert f"<string>:11: DeprecationWarning: The model '{DEPRECATED}'" in proc.stderr


# -- exceptions ------------------------------------------------------------------------------


def connection_error(stub: StubServer) -> Any:
    client = openai.OpenAI(base_url="http://127.0.0.1:9/v1", api_key="sk-test",
                           max_retries=0, timeout=5)
    return client.chat.completions.create(model="gpt-4o-mini", messages=MESSAGES)


def context_length_error(stub: StubServer) -> Any:
    client = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    return client.chat.completions.create(
        model="gpt-4", messages=[{"role": "user", "content": "word " * 40_000}])


def missing_argument(stub: StubServer) -> Any:
    return _anthropic(stub).messages.create(model="claude-sonnet-4-6",  # type: ignore[call-overload]
                                            messages=MESSAGES)


def anthropic_status_error(stub: StubServer) -> Any:
    return _anthropic(stub).messages.create(
        model="claude-3-haiku", max_tokens=10,
        messages=[{"role": "user", "content": "word " * 400_000}])


ERROR_CALLS = [connection_error, context_length_error, missing_argument,
               anthropic_status_error]


def _raised(call: Callable[[StubServer], Any], mode: str) -> dict[str, Any]:
    with StubServer() as stub, instrumented(mode), pytest.raises(Exception) as info:
        call(stub)
    exc = info.value
    frames = [(f.filename, f.name, f.lineno) for f in traceback.extract_tb(exc.__traceback__)]
    chain = []
    link: BaseException | None = exc
    while link is not None:
        chain.append((type(link), re.sub(r"127\.0\.0\.1:\d+", "stub", str(link))))
        link = link.__cause__ or link.__context__
    return {"type": type(exc), "text": chain[0][1], "chain": chain, "frames": frames,
            "ours": [f for f in frames if f[0].startswith(PACKAGE)]}


def _client_tracing(frame: tuple[str, str, int]) -> bool:
    return frame[0].endswith(f"anthropic{os.sep}_base_client.py") and frame[1] == "request"


@pytest.mark.parametrize("call", ERROR_CALLS, ids=lambda c: c.__name__)
def test_client_exceptions_pass_through_unchanged(call: Callable[..., Any]) -> None:
    plain = _raised(call, "none")
    ours = _raised(call, "ours")
    assert ours["type"] is plain["type"] and ours["text"] == plain["text"]
    assert ours["chain"] == plain["chain"]  # no exception of ours chained in
    # the traceback is the uninstrumented one with our wrapper's frame(s) inserted: the
    # application's frames first, the client's frames last, each the same
    assert plain["ours"] == [] and ours["ours"], ours["frames"]
    others = [f for f in ours["frames"] if f not in ours["ours"]]
    assert [f[:2] for f in others] == [f[:2] for f in plain["frames"]]
    # Lines too, but one: the Anthropic client's request() takes another branch (its own
    # HTTP span) whenever any span is current, as any instrumentation's inference span is.
    assert [f for f in others if not _client_tracing(f)] == [
        f for f in plain["frames"] if not _client_tracing(f)]
    assert ours["frames"][-1] == plain["frames"][-1]  # where it was raised


# -- return values and what the provider received --------------------------------------------


def _plain(value: Any) -> Any:
    """A response as data, without the fields that differ between two runs (times)."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json")
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k not in ("created", "created_at")}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _session(stub: StubServer) -> list[Any]:
    oa = openai.OpenAI(base_url=stub.openai_base_url, api_key="sk-test", max_retries=0)
    an = _anthropic(stub)
    history = [{"role": "system", "content": "You are a support agent."}, *MESSAGES]
    out: list[Any] = [
        oa.chat.completions.create(model="gpt-4o-mini", messages=history, max_tokens=50),
        list(oa.chat.completions.create(model="gpt-4o-mini", messages=history, stream=True,
                                        stream_options={"include_usage": True})),
        oa.responses.create(model="gpt-4o-mini", input=MESSAGES, instructions="Be brief."),
        oa.chat.completions.with_raw_response.create(model="gpt-4o-mini",
                                                     messages=history).parse(),
        an.messages.create(model="claude-sonnet-4-6", max_tokens=50, system="Be brief.",
                           messages=MESSAGES),
        list(an.messages.create(model="claude-sonnet-4-6", max_tokens=50, messages=MESSAGES,
                                stream=True)),
    ]
    with an.messages.stream(model="claude-sonnet-4-6", max_tokens=50,
                            messages=MESSAGES) as stream:
        out.append([event.type for event in stream])
        out.append(stream.get_final_message())

    async def async_calls() -> list[Any]:
        aoa = openai.AsyncOpenAI(base_url=stub.openai_base_url, api_key="sk-test",
                                 max_retries=0)
        aan = anthropic.AsyncAnthropic(base_url=stub.anthropic_base_url, api_key="sk-test",
                                       max_retries=0)
        return [await aoa.chat.completions.create(model="gpt-4o-mini", messages=history),
                await aan.messages.create(model="claude-sonnet-4-6", max_tokens=50,
                                          messages=MESSAGES)]

    out += asyncio.run(async_calls())
    return out


@pytest.mark.parametrize("mode", ["ours", "ours+official", "official+ours"])
def test_return_values_and_requests_are_unchanged(mode: str) -> None:
    with StubServer() as stub:
        plain = [(type(r), _plain(r)) for r in _session(stub)]
        plain_requests = stub.requests
    with StubServer() as stub, instrumented(mode) as spans:
        seen = [(type(r), _plain(r)) for r in _session(stub)]
        requests = stub.requests
    # it did record: each of the session's nine model calls, its assembly on its one span
    recorded = [s for s in spans.get_finished_spans() if S.ASSEMBLY_ID in (s.attributes or {})]
    assert len(recorded) == 9, [s.name for s in spans.get_finished_spans()]
    assert seen == plain
    assert requests == plain_requests


# -- the frame counting itself ---------------------------------------------------------------


def _warn_at(level: int, **kwargs: Any) -> tuple[str, int]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        warnings.warn("probe", UserWarning, level, **kwargs)  # noqa: B028 - the level varies
    (w,) = seen
    return w.filename, w.lineno


def _chain(depth: int, level: int) -> tuple[str, int]:
    return _chain(depth - 1, level) if depth else _warn_at(level)


def _internal_caller(level: int) -> tuple[str, int]:
    # a caller the interpreter treats as its import machinery (which counts every frame)
    namespace: dict[str, Any] = {"warnings": warnings, "level": level}
    code = compile("def f(level):\n    return warnings.warn('probe', UserWarning, level)\n",
                   "<frozen importlib._bootstrap>", "exec")
    exec(code, namespace)

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        namespace["f"](level)
    (w,) = seen
    return w.filename, w.lineno


def test_warnings_crossing_none_of_our_frames_name_the_same_frame() -> None:
    def outcomes() -> list[tuple[str, int]]:
        return ([_chain(4, level) for level in range(1, 9)]
                + [_chain(2, 500)]  # past the top of the stack: "sys", line 1
                + [_internal_caller(level) for level in (1, 2, 3)])

    before = outcomes()
    original = warnings.warn
    _frames.install()
    try:
        assert warnings.warn is not original  # the counting function is in place
        assert outcomes() == before
    finally:
        _frames.uninstall()
    assert before[-4][0] == "sys"


def _with_hook(monkeypatch: pytest.MonkeyPatch, outcome: Callable[[], Any],
               *hidden: Any) -> tuple[Any, Any]:
    """``outcome()`` uninstrumented, then with the warnings hook installed and only the
    ``hidden`` codes hidden."""
    before = outcome()
    monkeypatch.setattr(_frames, "_hidden", set())
    _frames.hide(*hidden)
    _frames.install()
    try:
        return before, outcome()
    finally:
        _frames.uninstall()


class _Level:
    """A level that is no int but says which one it stands for (``__index__``)."""

    def __index__(self) -> int:
        return 2


def _outcome(level: Any) -> tuple[Any, ...]:
    """Where a warning of ``level`` issued two frames down lands, or the error it raises."""
    try:
        return _chain(2, level)
    except Exception as exc:  # the interpreter's refusal of the level, compared as such
        return type(exc), str(exc)


#: levels the interpreter reads its own way: at most 0 names the issuer, as 1 does; a bool
#: or an object with ``__index__`` is its integer; one past its range, or no integer at all,
#: is its error
_ODD_LEVELS = (0, -1, -7, False, True, _Level(), sys.maxsize, -sys.maxsize - 1,
               sys.maxsize + 1, -sys.maxsize - 2, 1.5, "2", None)


@pytest.mark.parametrize("hidden", [False, True], ids=["no_wrapper_known", "wrappers_known"])
def test_odd_levels_land_where_they_land_uninstrumented(
        hidden: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    before = [_outcome(level) for level in _ODD_LEVELS]
    monkeypatch.setattr(_frames, "_hidden", set())
    if hidden:
        _frames.hide(_frames.nested)  # a code the warnings here never cross
    _frames.install()
    try:
        after = [_outcome(level) for level in _ODD_LEVELS]
    finally:
        _frames.uninstall()
    assert after == before
    here = _warn_at.__code__.co_filename
    assert [o[0] for o in before[:6]] == [here] * 6  # the issuer's line, not ours
    assert before[6] == before[7] == ("sys", 1)  # the interpreter's ends: past any stack
    assert [o[0] for o in before[8:]] == [OverflowError] * 2 + [TypeError] * 3


class _BadLevel:
    """A level whose ``__index__`` fails (and counts its calls)."""

    calls = 0

    def __index__(self) -> int:
        _BadLevel.calls += 1
        raise ValueError("no level")


#: calls the interpreter refuses: its error (type and message), whatever the level
_REFUSED: tuple[Callable[[], Any], ...] = (
    lambda: warnings.warn("m", UserWarning, 500, bogus=1),  # type: ignore[call-arg]
    lambda: warnings.warn("m", UserWarning, 2, bogus=1),  # type: ignore[call-arg]
    lambda: warnings.warn("m", UserWarning, 2, None, 5),  # type: ignore[call-arg]
    lambda: warnings.warn(),  # type: ignore[call-arg]  # noqa: B028 - no message either
    lambda: warnings.warn("m", UserWarning, _BadLevel()),  # type: ignore[arg-type]
    # a keyword of Python 3.12 on: refused before it, and in a wrong form after
    lambda: warnings.warn("m", UserWarning, 3, skip_file_prefixes=["/x"]),  # type: ignore
    lambda: warnings.warn("m", UserWarning, 3, skip_file_prefixes=("/x", 5)),  # type: ignore
    lambda: warnings.warn("m", stacklevel=2, message="x"),  # type: ignore[misc]
    lambda: warnings.warn("m", UserWarning, 1, None, skip_file_prefixes=(5,)),  # type: ignore
)


def test_refused_calls_raise_the_interpreters_error(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrapper(fn: Callable[[], Any]) -> Any:  # stands for our wrapper frame
        return fn()

    def outcomes() -> list[tuple[Any, ...]]:
        found = []
        for call in _REFUSED:
            _BadLevel.calls = 0
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                try:
                    wrapper(call)
                except Exception as exc:
                    found.append((type(exc), str(exc), _BadLevel.calls))
                    continue
            found.append(("issued", [(w.filename, w.lineno) for w in seen]))
        return found

    before, after = _with_hook(monkeypatch, outcomes, wrapper)
    assert after == before
    assert [o[0] for o in before] == [TypeError] * 4 + [ValueError] + [TypeError] * 4
    assert before[4][2] == 1  # the level read once


def test_a_warning_raised_as_an_error_is_issued_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under an error filter the warning raises from the hook as from the interpreter: once,
    not issued again as the count's fallback (its ``__context__`` would be the first)."""
    def wrapper(fn: Callable[[], Any]) -> Any:  # stands for our wrapper frame
        return fn()

    def raised(through: bool) -> tuple[Any, ...]:
        shown: list[Any] = []
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            monkeypatch.setattr(warnings, "showwarning", lambda *a, **k: shown.append(a))
            try:
                if through:
                    wrapper(lambda: warnings.warn("probe", DeprecationWarning, 2))
                else:
                    warnings.warn("probe", DeprecationWarning, 2)
            except DeprecationWarning as exc:
                return type(exc), exc.__context__, shown
        return (None,)

    before, after = _with_hook(monkeypatch, lambda: [raised(False), raised(True)], wrapper)
    assert after == before == [(DeprecationWarning, None, [])] * 2


def test_a_warning_issued_while_one_is_shown_counts_none_of_ours(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``showwarning`` (or a filter's ``match``) issuing a warning of its own, with a level
    that reaches below it: the interpreter's ``warn`` has no Python frame there, and neither
    do ours count (before, the inner warning named the hook's line)."""
    seen: list[tuple[str, str, int]] = []

    def show(message: Any, category: Any, filename: str, lineno: int, *rest: Any) -> None:
        seen.append((str(message), filename, lineno))
        if str(message) == "outer":  # show <- warnings' _showwarnmsg <- the issuer
            warnings.warn("inner", UserWarning, 3)  # noqa: B028 - the level is the point

    def outcome() -> list[tuple[str, str, int]]:
        seen.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            monkeypatch.setattr(warnings, "showwarning", show)
            warnings.warn("outer", UserWarning, 1)  # noqa: B028 - this line
        return list(seen)

    before, after = _with_hook(monkeypatch, outcome, _frames.nested)  # never crossed here
    assert after == before
    here = outcome.__code__.co_filename
    assert [(m, f) for m, f, _ in before] == [("outer", here), ("inner", here)]


class _IntSubclass(int):
    pass


class _LevelOfASubclass:
    """A level whose ``__index__`` returns a subclass of int, which the interpreter takes
    with a ``DeprecationWarning`` of its own, issued at the warning's issuer."""

    def __index__(self) -> int:
        return _IntSubclass(2)


def test_the_interpreters_warning_about_a_level_lands_where_it_does(
        monkeypatch: pytest.MonkeyPatch) -> None:
    def wrapper(fn: Callable[[], Any]) -> Any:  # stands for our wrapper frame
        return fn()

    def outcome() -> list[tuple[str, str, int]]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            wrapper(lambda: warnings.warn("probe", UserWarning,
                                          _LevelOfASubclass()))  # type: ignore[arg-type]
        return [(w.category.__name__, w.filename, w.lineno) for w in seen]

    before, after = _with_hook(monkeypatch, outcome, _frames.nested)  # never crossed here
    assert after == before
    assert [c for c, _, _ in before] == ["DeprecationWarning", "UserWarning"]
    assert before[0][1] == outcome.__code__.co_filename  # the issuer's line, not ours


def test_a_prefix_that_is_the_whole_file_name_skips_nothing() -> None:
    """The interpreter's ``skip_file_prefixes`` test leaves out the file name's last
    character (Python 3.12 on): a library passing its own ``__file__`` is not skipped."""
    code = _issue_plain.__code__
    name = code.co_filename
    assert not _frames._skipped(code, (name,))
    assert _frames._skipped(code, (name[:-1],))
    assert _frames._skipped(code, (os.path.dirname(name),))


def _issued_by_c(target: Callable[..., Any], *args: Any) -> list[tuple[str, int]]:
    """Warnings of ``target(*args)`` called by the interpreter with no Python frame below
    it (a thread started from C), where they land."""
    import _thread

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _thread.start_new_thread(target, args)
        for _ in range(500):  # nothing signals the thread's end but its record: bounded
            if seen:
                break
            time.sleep(0.01)
    return [(w.filename, w.lineno) for w in seen]


@pytest.mark.parametrize("level", [1, 2, 0])
def test_a_warning_with_no_python_caller_is_issued(level: int,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``warnings.warn`` called straight from C (a thread's target, an ``atexit``
    callback) has no frame below it: issued from ``sys``, line 1, as uninstrumented, never
    an error in the thread."""
    errors: list[Any] = []
    monkeypatch.setattr(threading, "excepthook", errors.append)
    monkeypatch.setattr(sys, "unraisablehook", errors.append)
    before, after = _with_hook(
        monkeypatch, lambda: _issued_by_c(warnings.warn, "probe", UserWarning, level),
        _frames.nested)
    assert before == after == [("sys", 1)]
    assert errors == []


def _issue_plain(level: int) -> None:
    warnings.warn("probe", UserWarning, level)  # noqa: B028 - the level varies


#: an issuer the interpreter takes for its import machinery (from there every frame counts)
_INTERNAL: dict[str, Any] = {"warnings": warnings}
exec(compile("def f(level):\n    warnings.warn('probe', UserWarning, level)\n",
             "<frozen importlib._bootstrap>", "exec"), _INTERNAL)
_issue_internal = _INTERNAL["f"]


def _record(fn: Callable[[], Any]) -> tuple[str, int]:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        fn()
    (w,) = seen
    return w.filename, w.lineno


@pytest.mark.parametrize("issue", [_issue_plain, _issue_internal],
                         ids=["plain_issuer", "import_machinery_issuer"])
def test_our_frames_are_not_counted(issue: Callable[[int], None],
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    def wrapper(fn: Callable[[], Any]) -> Any:  # stands for our wrapper frame
        return fn()

    def direct(level: int) -> None:
        issue(level)

    def through(level: int) -> None:
        wrapper(lambda: issue(level))

    monkeypatch.setattr(_frames, "_hidden", set())
    _frames.hide(wrapper, _frames.nested(through, "<lambda>"))
    _frames.install()
    try:
        for level in (1, 2, 3, 4, 5):
            got = _record(lambda: through(level))  # noqa: B023 - called at once
            expected = _record(lambda: direct(level))  # noqa: B023 - called at once
            # 1: the issuer (the same); 2: through() / direct() (their own lines); 3: the
            # lambdas above, one line apart; 4: _record (the same); 5: the lines above
            assert got[0] == expected[0], level
            assert got[1] == {1: expected[1], 2: through.__code__.co_firstlineno + 1,
                              3: expected[1] - 1, 4: expected[1], 5: expected[1] - 1}[level]
            if level == 2:
                assert expected[1] == direct.__code__.co_firstlineno + 1
    finally:
        _frames.uninstall()


def test_install_is_counted_and_restores_only_its_own() -> None:
    original = warnings.warn
    _frames.install()
    _frames.install()
    hooked = warnings.warn
    _frames.uninstall()
    assert warnings.warn is hooked  # one instrumentor still on
    _frames.uninstall()
    assert warnings.warn is original
    _frames.install()
    try:
        def someone_elses(*args: Any, **kwargs: Any) -> None:
            return None

        warnings.warn = someone_elses  # type: ignore[assignment]
        _frames.uninstall()
        assert warnings.warn is someone_elses  # not ours to undo
    finally:
        warnings.warn = original


def test_warnings_as_errors_raise_the_same_warning() -> None:
    with StubServer() as stub, instrumented("ours"), warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        with pytest.raises(DeprecationWarning, match=DEPRECATED):
            create_deprecated(stub)
        assert stub.requests == []  # raised before sending, as uninstrumented


class _Source:
    """A warning's ``source`` (what asyncio passes with a ResourceWarning: the unclosed
    object itself)."""


def _issue_with_source(level: int, source: Any) -> None:
    warnings.warn("probe", ResourceWarning, level, source=source)  # noqa: B028


@pytest.mark.parametrize("level", [1, 2, 3, 4])
def test_a_warning_keeps_nothing_of_its_own_alive(level: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """The counting function leaves no reference cycle behind (a frame holding itself): a
    warning's source, message and the frames it crossed are freed when it returns, not at
    the collector's next pass (every one of ~15 asyncio ResourceWarnings a turn of an Agents
    SDK run kept its event loop's objects alive until then)."""
    import gc
    import weakref

    def wrapper(fn: Callable[[], Any]) -> Any:  # stands for our wrapper frame
        return fn()

    def through(source: Any) -> None:
        wrapper(lambda: _issue_with_source(level, source))

    monkeypatch.setattr(_frames, "_hidden", set())
    _frames.hide(wrapper, _frames.nested(through, "<lambda>"))
    _frames.install()
    enabled = gc.isenabled()
    gc.disable()
    try:
        for issue in (through, lambda source: _issue_with_source(level, source)):
            source = _Source()
            alive = weakref.ref(source)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                issue(source)
            del source
            assert alive() is None
    finally:
        if enabled:
            gc.enable()
        _frames.uninstall()
