"""A lighter GenAI inference invocation for the common call: the same span and metrics as
``opentelemetry-util-genai``'s ``InferenceInvocation``, at about half its cost.

util-genai's invocation is built for every case: it composes with other instrumentors of the
same call (the outer one owns the span, the inner one publishes into it through a context
value), captures message content on spans, in events and through upload hooks, and follows
streams chunk by chunk. A call with content capture off uses little of that, yet it paid for
all of it on every call (in process, ~500K instructions of ~1.7M that ours added to an
Anthropic call): two dataclasses of 50 fields, a field-by-field merge with its own empty
context data, a 40-pair attribute walk, an environment read.

:class:`LightInference` records exactly what util-genai records for such a call: the span
(name ``chat <model>``, kind ``CLIENT``, the same start attributes, the same finish attributes
in the same order, the same error status and ``error.type``), made current while the call
runs; ``gen_ai.client.operation.duration`` and ``gen_ai.client.token.usage`` with the same
attributes, on util-genai's own instruments; nothing else (no event: util-genai emits one only
when asked, and then :func:`light_allowed` says no). ``tests/instrumentation/
test_light_inference.py`` compares the two on the same calls.

A stream is followed by our stream wrappers (util-genai's, see ``_common.OurSyncStream``),
which drive a light invocation as they drive util-genai's: the span current again around each
read (``_suspended``, ``activate``), ``request_stream`` set (``_request_stream``), each chunk's
time (``_on_stream_chunk``): the time to first chunk as a span attribute and a
``gen_ai.client.operation.time_to_first_chunk`` point, the gap before each later chunk a
``time_per_output_chunk`` point, with util-genai's metric attributes at that moment.
``tests/instrumentation/test_light_streams.py`` compares them on streams of every kind, ended
every way (drained, closed early, the application's error, the transport's, abandoned).

Composed with another util-genai instrumentor of the same call (the official GenAI one),
util-genai merges the two invocations into one span: the outer one owns it and publishes an
``InferenceData`` in its context, the inner one is a ``SuppressedInferenceInvocation`` that
writes its data into it when it ends, and the outer one merges that data (its own values
first) into its span and metrics. Both roles are here too, with the same results:

- ours outer (another wrapper between ours and the client's method): :class:`LightInference`
  with ``publish=True`` puts an empty ``InferenceData`` in its context, as util-genai's outer
  invocation does, so the other instrumentor's own invocation is suppressed and publishes into
  it; at the end its fields fill ours exactly as util-genai's merge does, and the span's
  attributes and the metric points are the ones util-genai's outer invocation would record;
- ours inner (an inference already under way: the official instrumentor outside ours):
  :class:`LightSuppressed` opens nothing; our records go on the current (outer) span and our
  fields are written into the outer ``InferenceData`` as util-genai's suppressed invocation
  writes them (its ``publish_to_context``), without building one (a 50-field dataclass, its
  field-by-field merge: ~200K instructions a call); of a stream, it keeps the time to first
  chunk (published as util-genai's suppressed invocation publishes it) and records no point.

The other instrumentor's code runs unchanged in both orders: its span, metrics and data are
its own. When anything else is in play (content capture, util-genai's event switch or
completion hook), the call goes through util-genai as before.
"""

from __future__ import annotations

import timeit
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from opentelemetry.context import Context, attach, detach, get_current, get_value, set_value
from opentelemetry.trace import SpanKind, get_current_span, set_span_in_context
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY, TelemetryHandler
from opentelemetry.util.genai.types import Error
from opentelemetry.util.genai.utils import fq_exception_type

from .._env import env_text
from .._fastattrs import _PublicSpan, _SdkSpan, set_attributes

try:  # the data util-genai's composed invocations share: a version without it never composes
    from opentelemetry.util.genai.invocation import InferenceData
except ImportError:  # pragma: no cover - depends on the installed util-genai
    InferenceData = None  # type: ignore[assignment,misc]
try:  # util-genai's private names: a version without them never takes the light path
    from opentelemetry.util.genai._conversation_context import CONVERSATION_ID_KEY
    from opentelemetry.util.genai.completion_hook import _NoOpCompletionHook
except ImportError:  # pragma: no cover - depends on the installed util-genai
    CONVERSATION_ID_KEY = _NoOpCompletionHook = None  # type: ignore[assignment,misc]
try:  # the API's key of the current span: without it, read through get_current_span
    from opentelemetry.trace.propagation import _SPAN_KEY
except ImportError:  # pragma: no cover - depends on the installed API
    _SPAN_KEY = None  # type: ignore[assignment]

__all__ = ["COMPOSABLE", "LightInference", "LightSuppressed", "light_allowed", "light_mode",
           "light_mode_of", "light_supported"]

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
#: version) are not here; setting one is an AttributeError (slots), so a new use cannot be
#: silently dropped. The time to first chunk is a stream's (:meth:`LightInference.
#: _on_stream_chunk`), under util-genai's name for it (``ttfc_seconds``).
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
    ("gen_ai.response.time_to_first_chunk", "ttfc_seconds", False),
)
_FIELDS = tuple(f for _, f, _ in _FINISH if f != "conversation_id")

#: our field -> util-genai's ``InferenceData`` field (the invocation's properties write these)
_DATA_FIELD: dict[str, str] = {
    "conversation_id": "conversation_id", "request_stream": "request_stream",
    "temperature": "request_temperature", "top_p": "request_top_p", "top_k": "request_top_k",
    "frequency_penalty": "request_frequency_penalty",
    "presence_penalty": "request_presence_penalty", "max_tokens": "request_max_tokens",
    "stop_sequences": "request_stop_sequences", "seed": "request_seed",
    "finish_reasons": "response_finish_reasons", "response_model_name": "response_model",
    "response_id": "response_id", "input_tokens": "usage_input_tokens",
    "output_tokens": "usage_output_tokens", "request_choice_count": "request_choice_count",
    "output_type": "output_type",
    "cache_write_input_tokens": "usage_cache_write_input_tokens",
    "cache_read_input_tokens": "usage_cache_read_input_tokens",
    "thinking_tokens": "usage_reasoning_output_tokens",
    "reasoning_level": "request_reasoning_level",
    "previous_response_id": "request_previous_response_id",
    "conversation_compacted": "conversation_compacted",
    "ttfc_seconds": "response_time_to_first_chunk",
}
#: the lists util-genai's setters copy
_LISTS = frozenset({"finish_reasons", "stop_sequences"})

#: util-genai's span attributes of an inference (``InferenceInvocation._get_attributes``), in
#: its order: (key, ``InferenceData`` field, how: "" the value, "or" zero is absent, "flag"
#: True when set). The composed outer invocation writes these from the merged data.
_ALL: tuple[tuple[str, str, str], ...] = (
    (_PROVIDER, "provider_name", ""),
    (_REQUEST_MODEL, "request_model", ""),
    (_SERVER_ADDRESS, "server_address", ""),
    (_SERVER_PORT, "server_port", ""),
    ("gen_ai.conversation.id", "conversation_id", ""),
    ("gen_ai.request.stream", "request_stream", ""),
    ("gen_ai.request.temperature", "request_temperature", ""),
    ("gen_ai.request.top_p", "request_top_p", ""),
    ("gen_ai.request.top_k", "request_top_k", ""),
    ("gen_ai.request.frequency_penalty", "request_frequency_penalty", ""),
    ("gen_ai.request.presence_penalty", "request_presence_penalty", ""),
    ("gen_ai.request.max_tokens", "request_max_tokens", ""),
    ("gen_ai.request.stop_sequences", "request_stop_sequences", ""),
    ("gen_ai.request.seed", "request_seed", ""),
    ("gen_ai.response.finish_reasons", "response_finish_reasons", "or"),
    (_RESPONSE_MODEL, "response_model", ""),
    ("gen_ai.response.id", "response_id", ""),
    ("gen_ai.usage.input_tokens", "usage_input_tokens", ""),
    ("gen_ai.usage.output_tokens", "usage_output_tokens", ""),
    ("gen_ai.request.choice.count", "request_choice_count", ""),
    ("gen_ai.output.type", "output_type", ""),
    ("gen_ai.usage.cache_write.input_tokens", "usage_cache_write_input_tokens", "or"),
    ("gen_ai.usage.cache_read.input_tokens", "usage_cache_read_input_tokens", "or"),
    ("gen_ai.usage.reasoning.output_tokens", "usage_reasoning_output_tokens", "or"),
    ("gen_ai.usage.text.input_tokens", "usage_text_input_tokens", "or"),
    ("gen_ai.usage.image.input_tokens", "usage_image_input_tokens", "or"),
    ("gen_ai.usage.audio.input_tokens", "usage_audio_input_tokens", "or"),
    ("gen_ai.usage.text.output_tokens", "usage_text_output_tokens", "or"),
    ("gen_ai.usage.image.output_tokens", "usage_image_output_tokens", "or"),
    ("gen_ai.usage.audio.output_tokens", "usage_audio_output_tokens", "or"),
    ("gen_ai.usage.text.cache_read.input_tokens", "usage_text_cache_read_input_tokens", "or"),
    ("gen_ai.usage.image.cache_read.input_tokens", "usage_image_cache_read_input_tokens",
     "or"),
    ("gen_ai.usage.audio.cache_read.input_tokens", "usage_audio_cache_read_input_tokens",
     "or"),
    ("gen_ai.request.reasoning.level", "request_reasoning_level", ""),
    ("gen_ai.request.previous_response.id", "request_previous_response_id", ""),
    ("gen_ai.conversation.compacted", "conversation_compacted", "flag"),
    ("gen_ai.prompt.name", "prompt_name", ""),
    ("gen_ai.prompt.version", "prompt_version", ""),
    ("gen_ai.response.time_to_first_chunk", "response_time_to_first_chunk", ""),
)


#: ``InferenceData``'s fields in the util-genai this was written against (1.3b0). The
#: composed roles read and write them by name: with any other set (a field renamed, removed
#: or added, which the official instrumentor might publish and we would drop) a composed
#: call goes through util-genai's own invocations instead.
_KNOWN_DATA_FIELDS = frozenset({
    "attributes", "capture_content", "conversation_compacted", "conversation_id",
    "error_type", "input_messages", "metric_attributes", "operation_name", "output_messages",
    "output_type", "prompt_name", "prompt_variable", "prompt_version", "provider_name",
    "request_choice_count", "request_frequency_penalty", "request_max_tokens",
    "request_model", "request_presence_penalty", "request_previous_response_id",
    "request_reasoning_level", "request_seed", "request_stop_sequences", "request_stream",
    "request_temperature", "request_top_k", "request_top_p", "response_finish_reasons",
    "response_id", "response_model", "response_time_to_first_chunk", "server_address",
    "server_port", "system_instructions", "tool_definitions", "upload_completion",
    "usage_audio_cache_read_input_tokens", "usage_audio_input_tokens",
    "usage_audio_output_tokens", "usage_cache_read_input_tokens",
    "usage_cache_write_input_tokens", "usage_image_cache_read_input_tokens",
    "usage_image_input_tokens", "usage_image_output_tokens", "usage_input_tokens",
    "usage_output_tokens", "usage_reasoning_output_tokens",
    "usage_text_cache_read_input_tokens", "usage_text_input_tokens",
    "usage_text_output_tokens"})


def _data_fields_known() -> bool:
    fields = getattr(InferenceData, "__dataclass_fields__", None)
    return fields is not None and frozenset(fields) == _KNOWN_DATA_FIELDS


#: whether the composed roles (publishing, or writing into another's data) may be used
COMPOSABLE = _data_fields_known()

#: A new ``InferenceData``'s fields, to publish one without its generated ``__init__``
#: (50 keyword defaults, ~20K instructions a call): only when every default is immutable
#: but the two dicts, which each new one gets fresh.
_FRESH = ("attributes", "metric_attributes")
_DATA_DEFAULTS: dict[str, Any] | None = None
if COMPOSABLE:
    _defaults = dict(vars(InferenceData()))
    if all(type(v) in (type(None), bool, int, float, str) for k, v in _defaults.items()
           if k not in _FRESH) and all(_defaults[k] == {} for k in _FRESH):
        _DATA_DEFAULTS = _defaults


def new_data() -> InferenceData:
    """A new ``InferenceData`` equal to ``InferenceData()`` (same fields, same order, fresh
    dicts), built by copying the defaults."""
    if _DATA_DEFAULTS is None:
        return InferenceData()
    data = InferenceData.__new__(InferenceData)
    fields = data.__dict__
    fields.update(_DATA_DEFAULTS)
    fields["attributes"] = {}
    fields["metric_attributes"] = {}
    return data


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
    if env_text(_EMIT_EVENT).strip().lower() == "true":
        return False
    return get_value(CLIENT_INFERENCE_CONTEXT_KEY, parent) is None


def light_mode(parent: Context | None) -> InferenceData | bool:
    """How this call may take the light path now: True, an inference of its own
    (:class:`LightInference`; util-genai would emit no event); the outer inference's data when
    one is under way whose data util-genai's suppressed invocation would receive without
    content or an upload (:class:`LightSuppressed`); False, through util-genai."""
    return light_mode_of(get_value(CLIENT_INFERENCE_CONTEXT_KEY, parent))


def light_mode_of(data: Any) -> InferenceData | bool:
    """:func:`light_mode` of a call whose parent context holds ``data`` under util-genai's
    inference key."""
    if data is None:
        return env_text(_EMIT_EVENT).strip().lower() != "true"
    if COMPOSABLE and type(data) is InferenceData and not data.capture_content and \
            not data.upload_completion:
        return data
    return False


class _Streamed:
    """What util-genai's stream wrappers set on the invocation they are given."""

    __slots__ = ()
    request_stream: bool | None

    @property
    def _request_stream(self) -> bool | None:
        """util-genai's name for ``request_stream``, which its stream wrappers set."""
        return self.request_stream

    @_request_stream.setter
    def _request_stream(self, value: bool | None) -> None:
        self.request_stream = value  # type: ignore[misc]  # a slot of each subclass


class LightInference(_Streamed):
    """The subset of util-genai's ``InferenceInvocation`` our instrumentors use, for a
    call or a stream (see the module's docstring)."""

    __slots__ = ("span", "_instruments", "_start_attributes", "_span_context", "_token",
                 "_start", "_finished", "conversation_id", "_error_type", "_data",
                 "_last_chunk", "_chunk_attributes", *_FIELDS)

    # the fields read here (the others are set by name, see _FINISH)
    response_model_name: str | None
    input_tokens: int | None
    output_tokens: int | None
    request_stream: bool | None
    ttfc_seconds: float | None

    def __init__(self, handler: TelemetryHandler, provider: str, *,
                 request_model: str | None, server_address: str | None,
                 server_port: int | None, context: Context | None,
                 publish: bool = False, current: Context | None = None) -> None:
        for name in _FIELDS:
            setattr(self, name, None)
        self._error_type: str | None = None
        #: with ``publish``: what another util-genai instrumentor of this call, inside ours,
        #: publishes for us (util-genai's outer invocation puts the same in its context)
        self._data: InferenceData | None = new_data() if publish else None
        self._finished = False
        #: a stream's: when its last chunk arrived; the metric attributes its chunks get
        #: after the call's end (util-genai's then, see :meth:`_on_stream_chunk`)
        self._last_chunk: float | None = None
        self._chunk_attributes: dict[str, Any] | None = None
        self._instruments = handler._instruments
        start: dict[str, Any] = {_OPERATION: "chat", _PROVIDER: provider}
        if request_model is not None:
            start[_REQUEST_MODEL] = request_model
        if server_address is not None:
            start[_SERVER_ADDRESS] = server_address
        if server_port is not None:
            start[_SERVER_PORT] = server_port
        self._start_attributes = start
        # what context None means, when the caller read it (``current``): read once
        base = context if context is not None else current
        conversation_id = get_value(CONVERSATION_ID_KEY, base)
        self.conversation_id = conversation_id if isinstance(conversation_id, str) else None
        if self.conversation_id:
            context = base = set_value(CONVERSATION_ID_KEY, self.conversation_id, base)
        self.span = handler._tracer.start_span(
            name=f"chat {request_model}" if request_model else "chat", kind=SpanKind.CLIENT,
            attributes=start, context=context)
        self._span_context = set_span_in_context(self.span, base)
        if self._data is not None:
            self._span_context = set_value(CLIENT_INFERENCE_CONTEXT_KEY, self._data,
                                           self._span_context)
        self._token: Any = attach(self._span_context)
        self._start = timeit.default_timer()

    def suspend(self) -> None:
        """Restore the context that was current before the call (idempotent)."""
        token, self._token = self._token, None
        if token is not None:
            detach(token)

    # -- a stream (util-genai's stream wrappers drive these, as they drive its invocation) --

    @property
    def _suspended(self) -> bool:
        """util-genai's: attached at the start and suspended since (then a stream wrapper
        makes the span current again around each read)."""
        return self._token is None

    @contextmanager
    def activate(self) -> Iterator[None]:
        """The span current inside the block (nothing once the call has ended)."""
        if self._finished:
            yield
            return
        token = attach(self._span_context)
        try:
            yield
        finally:
            detach(token)

    def _on_stream_chunk(self, chunk_at: float) -> None:
        """One chunk arrived at ``chunk_at``: util-genai's ``_on_stream_chunk`` for its own
        inference. The first chunk's delay from the start is the time to first chunk (a
        span attribute and a ``gen_ai.client.operation.time_to_first_chunk`` point), each
        later one's from the previous chunk a ``time_per_output_chunk`` point; their
        attributes are util-genai's metric attributes at that moment: the start ones and
        the response model once set, and after the call's end those of its last points."""
        last = self._last_chunk
        self._last_chunk = chunk_at
        attrs = self._chunk_attributes
        if attrs is None:
            attrs = self._start_attributes
            if self.response_model_name is not None:
                attrs = {**attrs, _RESPONSE_MODEL: self.response_model_name}
        if last is None:
            self.ttfc_seconds = delta = max(chunk_at - self._start, 0.0)
            self._instruments.time_to_first_chunk.record(delta, attributes=attrs,
                                                         context=self._span_context)
        else:
            self._instruments.time_per_output_chunk.record(
                max(chunk_at - last, 0.0), attributes=attrs, context=self._span_context)

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
            if self._data is not None:
                self._finish_merged(self._data)
                return
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
        self._record(attrs, self.input_tokens, self.output_tokens)

    def _record(self, attrs: dict[str, Any], input_tokens: int | None,
                output_tokens: int | None) -> None:
        self._chunk_attributes = attrs  # a stream's chunks read after the end get these
        instruments, context = self._instruments, self._span_context
        instruments.operation_duration.record(
            max(timeit.default_timer() - self._start, 0.0), attributes=attrs, context=context)
        for token_type, count in (("input", input_tokens), ("output", output_tokens)):
            if count is not None:
                instruments.token_usage.record(count, attributes=attrs | {_TOKEN_TYPE: token_type},
                                               context=context)

    def _finish_merged(self, data: InferenceData) -> None:
        """The end of an outer invocation that published ``data``: util-genai's outer
        ``_apply_finish`` after ``enrich_from_context`` (our values first, the published
        ones where ours are unset; no content: it merges none without content capture)."""
        start = self._start_attributes
        # the published data under ours (util-genai's ``merge``: our set values win)
        merged = dict(vars(data))
        merged["provider_name"] = start[_PROVIDER]
        for key, field in ((_REQUEST_MODEL, "request_model"),
                           (_SERVER_ADDRESS, "server_address"), (_SERVER_PORT, "server_port")):
            value = start.get(key)
            if value is not None:
                merged[field] = value
        for name in _FIELDS:
            value = getattr(self, name)
            if value is not None:
                merged[_DATA_FIELD[name]] = list(value) if name in _LISTS else value
        # the invocation's own conversation id, else the published one
        merged["conversation_id"] = self.conversation_id or data.conversation_id

        attrs: dict[str, Any] = {}
        for key, field, how in _ALL:
            value = merged[field]
            if value is None:
                continue
            if how:
                if not value:  # "or": zero or empty is absent; "flag": False is absent
                    continue
                if how == "flag":
                    value = True
                elif field == "response_finish_reasons":
                    value = list(value)
            attrs[key] = value
        attrs.update(self._own_first(data.attributes))
        set_attributes(self.span, {k: v for k, v in attrs.items() if k not in start})
        metric = dict(start)
        for key, field in ((_PROVIDER, "provider_name"), (_REQUEST_MODEL, "request_model"),
                           (_RESPONSE_MODEL, "response_model"),
                           (_SERVER_ADDRESS, "server_address"), (_SERVER_PORT, "server_port")):
            value = merged[field]
            if value is not None:
                metric[key] = value
        metric.update(self._own_first(data.metric_attributes))
        self._record(metric, merged["usage_input_tokens"], merged["usage_output_tokens"])

    def _own_first(self, published: dict[str, Any]) -> dict[str, Any]:
        """The invocation's own (span or metric) attributes after the merge: error.type
        first, then the published ones."""
        own: dict[str, Any] = {}
        if self._error_type is not None:
            own[_ERROR_TYPE] = self._error_type
        for key, value in published.items():
            own.setdefault(key, value)
        return own


#: whether an ``InferenceData``'s fields are plain instance attributes (no ``__setattr__``
#: of its own, no slots): then publishing into it is one ``dict.update``, what setting each
#: field stores
_DATA_PLAIN: bool = COMPOSABLE and InferenceData.__setattr__ is object.__setattr__ and \
    "__slots__" not in vars(InferenceData) and not any(
        hasattr(getattr(InferenceData, f, None), "__set__") for f in _KNOWN_DATA_FIELDS)


class LightSuppressed(_Streamed):
    """Ours inside another util-genai inference of the same call (the official instrumentor
    outside ours): what util-genai's ``SuppressedInferenceInvocation`` does there, without
    its dataclass (see the module's docstring). No span, no metrics: ``span`` is the outer
    one (current), and at the end our fields go into the outer invocation's data, which
    merges them under its own.

    A field (``_FINISH``'s, and ``conversation_id``) is None until set: the class holds the
    None and a set one is an instance attribute, so nothing is done for the fields a call
    leaves unset (most of them), at the start or at the end; a name that is not a field is
    refused when the data is published (``AttributeError``), as util-genai's dataclass
    property would be at once."""

    __slots__ = ("span", "_data", "_finished", "_start", "_where", "__dict__")

    # the fields read here (None on the class, see above)
    request_stream: bool | None
    ttfc_seconds: float | None
    conversation_id: str | None

    def __init__(self, data: InferenceData, provider: str, *, request_model: str | None,
                 server_address: str | None, server_port: int | None,
                 context: Context | None) -> None:
        self._data = data
        self._finished = False
        if context is None:
            context = get_current()
        # the context's values by subscript (``get_value`` and ``get_current_span`` without
        # their calls): a Context is a dict
        conversation_id = context.get(CONVERSATION_ID_KEY)
        if isinstance(conversation_id, str):
            self.conversation_id = conversation_id
        # util-genai's data of the suppressed invocation, before its fields are set
        self._where = (provider, request_model, server_address, server_port)
        span = context.get(_SPAN_KEY) if _SPAN_KEY is not None else None
        # an SDK span is a Span: get_current_span's check (an ABC's) only for another one
        self.span = span if type(span) is _SdkSpan or type(span) is _PublicSpan else \
            get_current_span(context)
        self._start = timeit.default_timer()

    def suspend(self) -> None:
        """Nothing to restore: a suppressed invocation makes nothing current."""

    def _on_stream_chunk(self, chunk_at: float) -> None:
        """A stream's chunk: util-genai's suppressed invocation records no metric, only the
        stream and its time to first chunk, published at the end."""
        if self.ttfc_seconds is None:
            self.ttfc_seconds = max(chunk_at - self._start, 0.0)
            self.request_stream = True

    def stop(self) -> None:
        self._finish()

    def fail(self, error: Error | BaseException) -> None:
        self._finish()  # util-genai publishes no error from a suppressed invocation

    def _finish(self) -> None:
        """``publish_to_context``: every field set here overwrites the outer data's."""
        if self._finished:
            return
        self._finished = True
        provider, request_model, server_address, server_port = self._where
        published: dict[str, Any] = {"provider_name": provider, "operation_name": "chat"}
        if request_model is not None:
            published["request_model"] = request_model
        if server_address is not None:
            published["server_address"] = server_address
        if server_port is not None:
            published["server_port"] = server_port
        fields = _DATA_FIELD
        try:  # a subscript each, not a ``get`` call: a name that is no field is the rare case
            for name, value in self.__dict__.items():  # the fields set (see the class)
                if value is not None:
                    published[fields[name]] = list(value) if name in _LISTS else value
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}") from None
        data = self._data
        if _DATA_PLAIN and type(data) is InferenceData:
            data.__dict__.update(published)  # the fields exist: what each setattr stores
        else:
            for field, value in published.items():
                setattr(data, field, value)


for _name in (*_FIELDS, "conversation_id"):
    setattr(LightSuppressed, _name, None)
del _name
