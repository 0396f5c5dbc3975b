"""A lighter GenAI inference invocation for the common call: the same span and metrics as
``opentelemetry-util-genai``'s ``InferenceInvocation``, at about half its cost.

util-genai's invocation is built for every case: it composes with other instrumentors of the
same call (the outer one owns the span, the inner one publishes into it through a context
value), captures message content on spans, in events and through upload hooks, and follows
streams chunk by chunk. A non-streaming call with content capture off, and nothing of that
kind composed around or under it, uses none of that, yet it paid for it on every call (in
process, ~500K instructions of ~1.7M that ours added to an Anthropic call): two dataclasses of
50 fields, a field-by-field merge with its own empty context data, a 40-pair attribute walk,
an environment read.

:class:`LightInference` records exactly what util-genai records for such a call: the span
(name ``chat <model>``, kind ``CLIENT``, the same start attributes, the same finish attributes
in the same order, the same error status and ``error.type``), made current while the call
runs; ``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` with the same
attributes, on util-genai's own instruments; nothing else (no event: util-genai emits one only
when asked, and then :func:`light_allowed` says no). ``tests/instrumentation/
test_light_inference.py`` compares the two on the same calls.

When anything else is in play (content capture, util-genai's event switch or completion hook,
an inference already under way in the context, another wrapper between ours and the client's
method, a stream), the call goes through util-genai as before.
"""

from __future__ import annotations

import os
import timeit
from typing import Any

from opentelemetry.context import Context, attach, detach, get_value, set_value
from opentelemetry.trace import SpanKind, set_span_in_context
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY, TelemetryHandler
from opentelemetry.util.genai.types import Error
from opentelemetry.util.genai.utils import fq_exception_type

from .._fastattrs import set_attributes

try:  # util-genai's private names: a version without them never takes the light path
    from opentelemetry.util.genai._conversation_context import CONVERSATION_ID_KEY
    from opentelemetry.util.genai.completion_hook import _NoOpCompletionHook
except ImportError:  # pragma: no cover - depends on the installed util-genai
    CONVERSATION_ID_KEY = _NoOpCompletionHook = None  # type: ignore[assignment,misc]

__all__ = ["LightInference", "light_allowed", "light_supported"]

_EMIT_EVENT = "OTEL_INSTRUMENTATION_GENAI_EMIT_EVENT"

_OPERATION = "gen_ai.operation.name"
_PROVIDER = "gen_ai.provider.name"
_REQUEST_MODEL = "gen_ai.request.model"
_SERVER_ADDRESS = "server.address"
_SERVER_PORT = "server.port"
_RESPONSE_MODEL = "gen_ai.response.model"
_ERROR_TYPE = "error.type"
_TOKEN_TYPE = "gen_ai.token.type"

#: util-genai's finish attributes after the start ones, in its order: (key, field, zero is
#: absent). Fields util-genai has that we never set (modality tokens, prompt name and
#: version, time to first chunk: a stream's) are not here; setting one is an AttributeError
#: (slots), so a new use cannot be silently dropped.
_FINISH: tuple[tuple[str, str, bool], ...] = (
    ("gen_ai.conversation.id", "conversation_id", True),
    ("gen_ai.request.stream", "request_stream", False),
    ("gen_ai.request.temperature", "temperature", False),
    ("gen_ai.request.top_p", "top_p", False),
    ("gen_ai.request.top_k", "top_k", False),
    ("gen_ai.request.frequency_penalty", "frequency_penalty", False),
    ("gen_ai.request.presence_penalty", "presence_penalty", False),
    ("gen_ai.request.max_tokens", "max_tokens", False),
    ("gen_ai.request.stop_sequences", "stop_sequences", False),
    ("gen_ai.request.seed", "seed", False),
    ("gen_ai.response.finish_reasons", "finish_reasons", True),
    (_RESPONSE_MODEL, "response_model_name", False),
    ("gen_ai.response.id", "response_id", False),
    ("gen_ai.usage.input_tokens", "input_tokens", False),
    ("gen_ai.usage.output_tokens", "output_tokens", False),
    ("gen_ai.request.choice.count", "request_choice_count", False),
    ("gen_ai.output.type", "output_type", False),
    ("gen_ai.usage.cache_write.input_tokens", "cache_write_input_tokens", True),
    ("gen_ai.usage.cache_read.input_tokens", "cache_read_input_tokens", True),
    ("gen_ai.usage.reasoning.output_tokens", "thinking_tokens", True),
    ("gen_ai.request.reasoning.level", "reasoning_level", False),
    ("gen_ai.request.previous_response.id", "previous_response_id", False),
    ("gen_ai.conversation.compacted", "conversation_compacted", True),
)
_FIELDS = tuple(f for _, f, _ in _FINISH if f != "conversation_id")


def light_supported(handler: TelemetryHandler) -> bool:
    """Whether this handler's configuration lets calls take the light path at all: its
    internals are the ones we know, content capture is off and no completion hook is set."""
    if CONVERSATION_ID_KEY is None or _NoOpCompletionHook is None:
        return False
    return (hasattr(handler, "_tracer") and hasattr(handler, "_instruments")
            and all(hasattr(handler._instruments, name)
                    for name in ("operation_duration", "token_usage"))
            and isinstance(getattr(handler, "_completion_hook", None), _NoOpCompletionHook)
            and not handler.should_capture_content())


def light_allowed(parent: Context | None) -> bool:
    """Whether this call may take the light path now: util-genai would emit no event, and
    no inference is under way in the context the call starts from (then util-genai merges
    the two into one span)."""
    if os.environ.get(_EMIT_EVENT, "").strip().lower() == "true":
        return False
    return get_value(CLIENT_INFERENCE_CONTEXT_KEY, parent) is None


class LightInference:
    """The subset of util-genai's ``InferenceInvocation`` our instrumentors use, for a
    non-streaming call (see the module's docstring)."""

    __slots__ = ("span", "_instruments", "_start_attributes", "_span_context", "_token",
                 "_start", "_finished", "conversation_id", "_error_type", *_FIELDS)

    # the fields read here (the others are set by name, see _FINISH)
    response_model_name: str | None
    input_tokens: int | None
    output_tokens: int | None

    def __init__(self, handler: TelemetryHandler, provider: str, *,
                 request_model: str | None, server_address: str | None,
                 server_port: int | None, context: Context | None) -> None:
        for name in _FIELDS:
            setattr(self, name, None)
        self._error_type: str | None = None
        self._finished = False
        self._instruments = handler._instruments
        start: dict[str, Any] = {_OPERATION: "chat", _PROVIDER: provider}
        if request_model is not None:
            start[_REQUEST_MODEL] = request_model
        if server_address is not None:
            start[_SERVER_ADDRESS] = server_address
        if server_port is not None:
            start[_SERVER_PORT] = server_port
        self._start_attributes = start
        conversation_id = get_value(CONVERSATION_ID_KEY, context)
        self.conversation_id = conversation_id if isinstance(conversation_id, str) else None
        if self.conversation_id:
            context = set_value(CONVERSATION_ID_KEY, self.conversation_id, context)
        self.span = handler._tracer.start_span(
            name=f"chat {request_model}" if request_model else "chat", kind=SpanKind.CLIENT,
            attributes=start, context=context)
        self._span_context = set_span_in_context(self.span, context)
        self._token: Any = attach(self._span_context)
        self._start = timeit.default_timer()

    def suspend(self) -> None:
        """Restore the context that was current before the call (idempotent)."""
        token, self._token = self._token, None
        if token is not None:
            detach(token)

    def stop(self) -> None:
        self._finish(None)

    def fail(self, error: Error | BaseException) -> None:
        if isinstance(error, BaseException):
            exc = error
            try:
                error = Error.from_exception(exc)
            except Exception:  # its str() raised: the span must end all the same
                error = Error(message=None, type=fq_exception_type(exc), exception=exc)
        self._finish(error)

    def _finish(self, error: Error | None) -> None:
        if self._finished:
            return
        self._finished = True
        try:
            span = self.span
            if error is not None:
                span.set_status(Status(StatusCode.ERROR, error.message))
                self._error_type = error.type
            attrs: dict[str, Any] = {}
            for key, name, zero_absent in _FINISH:
                value = getattr(self, name)
                if value is None or (zero_absent and not value):
                    continue
                attrs[key] = True if name == "conversation_compacted" else (
                    list(value) if name in ("finish_reasons", "stop_sequences") else value)
            if self._error_type is not None:
                attrs[_ERROR_TYPE] = self._error_type
            set_attributes(span, attrs)
            self._record_metrics()
        finally:
            self.suspend()
            self.span.end()

    def _record_metrics(self) -> None:
        attrs = dict(self._start_attributes)
        if self.response_model_name is not None:
            attrs[_RESPONSE_MODEL] = self.response_model_name
        if self._error_type is not None:
            attrs[_ERROR_TYPE] = self._error_type
        instruments, context = self._instruments, self._span_context
        instruments.operation_duration.record(
            max(timeit.default_timer() - self._start, 0.0), attributes=attrs, context=context)
        for token_type, count in (("input", self.input_tokens), ("output", self.output_tokens)):
            if count is not None:
                instruments.token_usage.record(count, attributes=attrs | {_TOKEN_TYPE: token_type},
                                               context=context)
