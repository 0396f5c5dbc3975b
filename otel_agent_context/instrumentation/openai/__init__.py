"""Context lifecycle of OpenAI calls: chat completions and the Responses API.

Sync and async, streaming or not (the SDK's ``chat.completions.stream`` and
``responses.stream`` helpers go through ``create`` and are covered too)::

    from otel_agent_context.instrumentation.openai import OpenAIContextInstrumentor

    OpenAIContextInstrumentor().instrument()

or ``opentelemetry-instrument python agent.py``. Each call records an assembly (one block per
message or input item, with its context kind, injection point and token estimate), a budget
(the model's window, the reserved output, overflow), the injection on the inference span and,
from the response, the actual input, cached and output tokens. ``truncation="auto"`` is the
``truncate_middle`` overflow strategy, compaction items mark the conversation compacted,
``previous_response_id``, a stored ``conversation`` and a stored ``prompt`` are ``ref`` blocks
(the conversation also the call's ``gen_ai.conversation.id``), and a context-length error is a
rejected overflow.
``responses.compact`` is a compaction: the items it replaces are its sources, the user messages
it keeps are not, its summary is the compaction item.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from opentelemetry.instrumentation.instrumentor import (  # type: ignore[attr-defined]
    BaseInstrumentor,
)

from .._common import (
    Api,
    ClientTelemetry,
    LiveTelemetry,
    Wrapped,
    async_wrapper,
    helper_aexit,
    helper_exit,
    sync_wrapper,
    unwrap_all,
    wrap_all,
)
from . import _extract as X

__all__ = ["OpenAIContextInstrumentor"]

_instruments = ("openai >= 1.40.0, < 4",)

_CHAT = "openai.resources.chat.completions"
_RESPONSES = "openai.resources.responses.responses"
_CHAT_HELPER = "openai.lib.streaming.chat._completions"
_RESPONSES_HELPER = "openai.lib.streaming.responses._responses"


class OpenAIContextInstrumentor(BaseInstrumentor):  # type: ignore[misc]
    """Records the context of every OpenAI chat completion and response.

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
        chat = Api(X.chat_request, X.chat_response, X.ChatAccumulator, X.chat_is_stream,
                   X.PROVIDER, "messages", X.chat_plain, X.chat_plain_response)
        responses = Api(X.responses_request, X.responses_response, X.ResponsesAccumulator,
                        X.responses_is_stream, X.PROVIDER, None, X.responses_plain,
                        X.responses_plain_response)
        compact = Api(X.compact_request, X.compact_response, X.ResponsesAccumulator,
                      X.compact_is_stream, X.PROVIDER)
        # create and parse (structured outputs: LangChain's with_structured_output and
        # create_agent(response_format=...) call chat.completions.with_raw_response.parse);
        # with_raw_response / with_streaming_response call these same methods.
        self._wrapped = wrap_all((
            (_CHAT, "Completions.create", sync_wrapper(tel, chat)),
            (_CHAT, "AsyncCompletions.create", async_wrapper(tel, chat)),
            (_CHAT, "Completions.parse", sync_wrapper(tel, chat)),
            (_CHAT, "AsyncCompletions.parse", async_wrapper(tel, chat)),
            (_RESPONSES, "Responses.create", sync_wrapper(tel, responses)),
            (_RESPONSES, "AsyncResponses.create", async_wrapper(tel, responses)),
            (_RESPONSES, "Responses.parse", sync_wrapper(tel, responses)),
            (_RESPONSES, "AsyncResponses.parse", async_wrapper(tel, responses)),
            (_RESPONSES, "Responses.compact", sync_wrapper(tel, compact)),
            (_RESPONSES, "AsyncResponses.compact", async_wrapper(tel, compact)),
            # the stream() helpers' managers: an error leaving their block fails the call
            (_RESPONSES_HELPER, "ResponseStreamManager.__exit__", helper_exit),
            (_RESPONSES_HELPER, "AsyncResponseStreamManager.__aexit__", helper_aexit),
            (_CHAT_HELPER, "ChatCompletionStreamManager.__exit__", helper_exit),
            (_CHAT_HELPER, "AsyncChatCompletionStreamManager.__aexit__", helper_aexit),
        ))

    def _uninstrument(self, **kwargs: Any) -> None:
        if self._live is not None:
            self._live.current = None
        unwrap_all(self._wrapped)
