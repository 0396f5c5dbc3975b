"""Context lifecycle of Anthropic Messages calls (``messages`` and ``beta.messages``).

``create`` (sync and async, streaming or not) and the ``stream()`` helper::

    from otel_agent_context.instrumentation.anthropic import AnthropicContextInstrumentor

    AnthropicContextInstrumentor().instrument()

or ``opentelemetry-instrument python agent.py``. Each call records an assembly (system
blocks, then one block per content block of each message: text, tool uses, tool results),
``cache_control`` breakpoints as ``cache_prefix_N`` window segments, a budget from the model's
window and ``max_tokens``, the injection on the inference span, usage with cache read and
write tokens, and ``context_management`` edits (beta) as a ``provider_context_editing``
compaction whose sources are the tool results the edit cleared. A ``prompt is too long``
error is a rejected overflow.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import AsyncIterator, Callable, Collection, Iterator
from typing import Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)
from wrapt import ObjectProxy

from .. import _frames
from .._common import (
    Api,
    ClientTelemetry,
    LiveTelemetry,
    Wrapped,
    _begin,
    _materialize,
    async_wrapper,
    guarded,
    on_close,
    sync_wrapper,
    unwrap_all,
    wrap_all,
)
from . import _extract as X

__all__ = ["AnthropicContextInstrumentor"]

_log = logging.getLogger(__name__)

_instruments = ("anthropic >= 0.40.0, < 3",)

_MESSAGES = "anthropic.resources.messages"
_BETA = "anthropic.resources.beta.messages"


class _StreamManager(ObjectProxy):  # type: ignore[misc]
    """The ``messages.stream()`` manager: the call starts on enter and ends on exit."""

    def __init__(self, manager: Any, tel: ClientTelemetry, api: Api, instance: Any,
                 args: tuple[Any, ...], kwargs: dict[str, Any], wrapped: Any = None) -> None:
        super().__init__(manager)
        self._self_start = (tel, api, instance, args, kwargs, wrapped)
        self._self_call: Any = None
        self._self_stream: Any = None
        self._self_exiting = False

    def _enter(self) -> None:
        tel, api, instance, args, kwargs, wrapped = self._self_start
        # the light inference (the stream is the SDK's, read at the end: no chunk of it
        # passes through ours); ``wrapped``: another instrumentor's wrapper inside ours
        self._self_call = _begin(tel, api, instance, args, {**kwargs, "stream": True}, True,
                                 wrapped)

    def _entered(self, stream: Any) -> Any:
        self._self_stream = stream
        call = self._self_call
        if call is not None:
            call.invocation.suspend()
            self._end_on_close(stream)
            if call.inside_another:
                self._end_when_read(stream)
        return stream

    def _end_when_read(self, stream: Any) -> None:
        """The call ends when the stream's events run out (or one of them raises) too, when
        another instrumentor's inference holds the call's span (the official one's manager
        around ours): its stream wrapper ends that span when its own iteration ends, before
        its manager's exit calls ours, and our end came after the span's (``text_stream``
        and ``get_final_message`` read the same events: they end here too). Only then:
        alone, ours stays out of the events' way."""
        try:
            events = getattr(stream, "__dict__", {}).get("_iterator") if type(
                stream).__module__.startswith("anthropic.") else None
            if inspect.isgenerator(events):
                stream._iterator = _ended_when_read(events, self._exit)
            elif inspect.isasyncgen(events):
                stream._iterator = _ended_when_read_async(events, self._exit)
        except Exception:  # noqa: BLE001 - a stream of another make: the exit ends the call
            _log.debug("otel_agent_context: cannot follow the stream's events", exc_info=True)

    def _end_on_close(self, stream: Any) -> None:
        """The call ends when the stream is closed too: another instrumentor's manager
        around ours (OpenInference's) leaves its block by closing the stream, never calling
        our ``__exit__``, and the call stayed open. Closed by our manager's exit (the SDK's
        closes it), the exit ends it, with the block's error."""
        if not type(stream).__module__.startswith("anthropic."):
            return  # another's proxy of the stream (the official instrumentor's, inside
            # ours): its close calls the stream's, which would call it again

        def closed(caller: Any, handled: BaseException | None) -> None:
            if not self._self_exiting:
                self._exit(_handled(caller, handled))

        try:
            on_close(stream, closed)
        except Exception:  # noqa: BLE001 - a stream that takes no attribute: exit only
            _log.debug("otel_agent_context: cannot follow the stream's close", exc_info=True)

    @guarded
    def _exit(self, exc: BaseException | None) -> None:
        call = self._self_call
        if call is None or call.done:
            return
        out = (X.snapshot_outcome(self._self_stream, call.tel.capture)
               if self._self_stream is not None else None)
        if exc is None:
            call.finish(out)
        else:
            call.fail(exc, out)

    def __enter__(self) -> Any:
        self._enter()
        try:
            stream = self.__wrapped__.__enter__()
        except BaseException as exc:
            self._exit(exc)
            raise
        return self._entered(stream)

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        self._self_exiting = True
        try:
            return self.__wrapped__.__exit__(exc_type, exc, tb)
        finally:
            self._exit(exc)

    async def __aenter__(self) -> Any:
        self._enter()
        try:
            stream = await self.__wrapped__.__aenter__()
        except BaseException as exc:
            self._exit(exc)
            raise
        return self._entered(stream)

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> Any:
        self._self_exiting = True
        try:
            return await self.__wrapped__.__aexit__(exc_type, exc, tb)
        finally:
            self._exit(exc)


def _ended_when_read(events: Iterator[Any], end: Callable[[BaseException | None], None]
                     ) -> Iterator[Any]:
    """``events``, then ``end`` once they run out or raise (a stream closed before, its
    generator closed: the exit ends the call)."""
    try:
        yield from events
    except GeneratorExit:
        raise
    except BaseException as exc:
        end(exc)
        raise
    end(None)


async def _ended_when_read_async(events: AsyncIterator[Any],
                                 end: Callable[[BaseException | None], None]
                                 ) -> AsyncIterator[Any]:
    """:func:`_ended_when_read` of an async stream's events."""
    try:
        async for event in events:
            yield event
    except GeneratorExit:
        raise
    except BaseException as exc:
        end(exc)
        raise
    end(None)


def _handled(caller: Any, error: BaseException | None) -> Exception | None:
    """The error a ``with`` block leaves with, when a manager's ``__exit__`` (the caller)
    closes the stream: the interpreter runs ``__exit__`` as a handler of that error. None
    for a close anywhere else: an application that closes the stream in its own ``except``
    handled that error, the call did not fail with it."""
    if caller is None or caller.f_code.co_name not in ("__exit__", "__aexit__"):
        return None
    return error if isinstance(error, Exception) else None


# the manager's methods stand between the application's ``with`` and the SDK's
_frames.hide(_StreamManager.__enter__, _StreamManager.__exit__, _StreamManager.__aenter__,
             _StreamManager.__aexit__, _ended_when_read, _ended_when_read_async)


def _stream_wrapper(tel: ClientTelemetry, api: Api) -> Any:
    def wrapper(wrapped: Any, instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        live = tel.live.current
        if live is None:  # uninstrumented: a wrapper a client kept (see LiveTelemetry)
            return wrapped(*args, **kwargs)
        # The manager keeps these kwargs for the request it sends on __enter__, and we read
        # them then too: one-shot iterators become lists now, so both see the same data.
        readable = guarded(_materialize)(kwargs)
        manager = wrapped(*args, **kwargs)
        if not readable:  # the application's iterable raised: the SDK raises it on enter
            return manager
        try:
            return _StreamManager(manager, live, api, instance, args, kwargs, wrapped)
        except Exception:  # pragma: no cover - proxying cannot fail in practice
            return manager

    return wrapper


class AnthropicContextInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records the context of every Anthropic message.

    ``instrument(tracer_provider=, meter_provider=, logger_provider=, capture_content=)``;
    ``capture_content`` defaults to ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
    """

    _wrapped: Wrapped | list[tuple[Any, str]] = []
    #: the telemetry every wrapper of this instrumentor records with (see LiveTelemetry)
    _live: LiveTelemetry | None = None

    def instrumentation_dependencies(self) -> Collection[str]:
        return _instruments

    def _instrument(self, **kwargs: Any) -> None:
        tel = ClientTelemetry(__name__, **kwargs)
        if self._live is None:
            self._live = LiveTelemetry()
        tel.live = self._live
        self._live.current = tel
        api = Api(X.messages_request, X.messages_response, X.MessagesAccumulator,
                  X.messages_is_stream, X.PROVIDER, plain=X.messages_plain,
                  plain_response=X.messages_plain_response)
        targets = []
        for module in (_MESSAGES, _BETA):
            targets += [
                (module, "Messages.create", sync_wrapper(tel, api)),
                (module, "AsyncMessages.create", async_wrapper(tel, api)),
                # structured outputs post on their own (not through create)
                (module, "Messages.parse", sync_wrapper(tel, api)),
                (module, "AsyncMessages.parse", async_wrapper(tel, api)),
                (module, "Messages.stream", _stream_wrapper(tel, api)),
                (module, "AsyncMessages.stream", _stream_wrapper(tel, api)),
            ]
        self._wrapped = wrap_all(targets)

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._live is not None:
            self._live.current = None
        unwrap_all(self._wrapped)
