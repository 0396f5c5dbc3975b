"""A local stub of the OpenAI and Anthropic wire APIs, for tests, examples and benchmarks.

Serves on loopback only and never calls out. It speaks just enough of each API for the real
``openai`` and ``anthropic`` client libraries (pointed at it with ``base_url``) to work:

- OpenAI ``POST /v1/chat/completions``, ``POST /v1/responses`` and
  ``POST /v1/responses/compact`` (user messages kept, one compaction item), JSON or SSE streaming
  (``stream: true``), usage with cached tokens, ``previous_response_id`` (stored responses),
  ``truncation: "auto"`` (drops the middle of the input to fit) and ``context_management``
  compaction (a ``compaction`` output item), and a ``context_length_exceeded`` 400 when the
  prompt plus the reserved output does not fit the model's window.
- Anthropic ``POST /v1/messages`` (and the beta ``?beta=true``), JSON or SSE, prompt caching
  (``cache_control`` breakpoints: written once, read after), ``context_management`` edits
  (``clear_tool_uses_20250919``) reported as ``applied_edits``, the ``prompt is too long``
  400, and the ``input length and `max_tokens` exceed context limit`` 400 when the prompt
  fits the window but not with ``max_tokens``.
- Tool calls on request: a Responses API request with ``tools`` whose last input item is a
  user message containing ``[call:NAME {json arguments}]`` (NAME one of its function tools)
  is answered with that ``function_call`` instead of text (for agent frameworks' tests); a
  chat completions request likewise with a ``tool_calls`` message (not streamed).
- ReAct on request: a chat completions request (not streamed) whose last message is a user
  message containing ``[react:NAME {json arguments}]`` is answered in the ReAct text format
  (``Thought:`` / ``Action: NAME`` / ``Action Input: {...}``); when a user message asked so
  and the last message is the tool's ``Observation:``, with ``Thought:`` / ``Answer:`` and the
  fixed reply (LlamaIndex's ``ReActAgent`` parses both). Likewise ``[execute:CODE]`` is
  answered with ``<execute>print(CODE)</execute>`` (a code-acting agent's form), and the
  code's result (``Result of executing the code given:``) with the fixed reply.

Deterministic: token counts are characters / 4 (rounded up) plus a little per message, the
reply is a fixed sentence, ids count up. Start with ``with StubServer() as stub:``; the
OpenAI base URL is ``stub.openai_base_url``, the Anthropic one ``stub.anthropic_base_url``.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["StubServer", "stub_tokens"]

#: Context windows the stub enforces (tokens); other models get 128k.
WINDOWS = {"gpt-4": 8_192, "gpt-4o": 128_000, "gpt-4o-mini": 128_000,
           "gpt-3.5-turbo": 16_385, "claude-3-haiku": 200_000}
DEFAULT_WINDOW = 128_000
#: a dated snapshot of a model: ``gpt-4o-2024-08-06``, ``claude-3-haiku-20240307``
_SNAPSHOT = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")
_CALL = re.compile(r"\[call:([\w-]+)(?: (\{.*?\}))?\]")
_REACT = re.compile(r"\[react:([\w-]+)(?: (\{.*?\}))?\]")
_EXECUTE = re.compile(r"\[execute:([^\]]+)\]")
_OBSERVED = {"Observation:": _REACT, "Result of executing the code given:": _EXECUTE}
REPLY = "The order shipped yesterday and should arrive within three business days."


def stub_tokens(text: str) -> int:
    """The stub's own token count (characters / 4, rounded up)."""
    return (len(text) + 3) // 4


def _window(model: str) -> int:
    """The model's window: its own name, or the name of the model a dated snapshot is of;
    never a mere prefix (``gpt-4`` is not ``gpt-4o-mini``)."""
    if not isinstance(model, str):
        return DEFAULT_WINDOW  # a request's odd model value: the stub answers, as a provider
    window = WINDOWS.get(model) or WINDOWS.get(_SNAPSHOT.sub("", model))
    return window or DEFAULT_WINDOW


def _instance(schema: Any, defs: dict[str, Any], depth: int = 0) -> Any:
    """A value that validates against a (Pydantic-made) JSON schema: what a structured
    output request gets back."""
    if not isinstance(schema, dict) or depth > 8:
        return None
    ref = schema.get("$ref")
    if isinstance(ref, str):
        return _instance(defs.get(ref.rsplit("/", 1)[-1]), defs, depth + 1)
    for key in ("anyOf", "oneOf", "allOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _instance(schema[key][0], defs, depth + 1)
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "object":
        return {name: _instance(sub, defs, depth + 1)
                for name, sub in (schema.get("properties") or {}).items()}
    if kind == "array":
        return [_instance(schema.get("items"), defs, depth + 1)]
    return {"string": REPLY, "integer": 1, "number": 1.0, "boolean": True,
            "null": None}.get(kind if isinstance(kind, str) else "string", REPLY)


def _structured_reply(fmt: Any) -> str:
    """The reply text: REPLY, or a JSON instance of the requested schema (json_schema)."""
    if not isinstance(fmt, dict) or fmt.get("type") != "json_schema":
        return REPLY
    nested = fmt.get("json_schema")
    spec: dict[str, Any] = nested if isinstance(nested, dict) else fmt
    schema = spec.get("schema") or {}
    return json.dumps(_instance(schema, schema.get("$defs") or {}))


def _text_of(content: Any) -> str:
    """Plain text of a message content (string, list of parts, or anything JSON)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text_of(p) for p in content)
    if isinstance(content, dict):
        for key in ("text", "content", "output", "arguments", "encrypted_content", "input"):
            if key in content:
                value = content[key]
                return value if isinstance(value, str) else _text_of(value)
        return ""
    return json.dumps(content)


def _requested_call(items: list[Any], tools: Any) -> tuple[str, str] | None:
    """The function call the last user message asks for (``[call:NAME {args}]``), if NAME
    is one of the request's function tools."""
    if not items or not isinstance(tools, list):
        return None
    last = items[-1]
    if not isinstance(last, dict) or last.get("role") != "user":
        return None
    match = _CALL.search(_text_of(last.get("content")))
    if match is None:
        return None
    names = {t.get("name") for t in tools if isinstance(t, dict)}
    if match.group(1) not in names:
        return None
    return match.group(1), match.group(2) or "{}"


def _text_format_reply(messages: list[Any]) -> str | None:
    """The reply a ``[react:NAME {args}]`` or ``[execute:CODE]`` request asks for (a ReAct
    action, code to run, or the answer after the tool's observation or the code's result), if
    any."""
    if not messages or not isinstance(messages[-1], dict) \
            or messages[-1].get("role") != "user":
        return None
    last = _text_of(messages[-1].get("content"))
    for prefix, marker in _OBSERVED.items():
        if last.startswith(prefix):
            if not any(isinstance(m, dict) and m.get("role") == "user"
                       and marker.search(_text_of(m.get("content"))) for m in messages):
                return None
            if marker is _EXECUTE:
                return REPLY
            return f"Thought: I can answer without using any more tools.\nAnswer: {REPLY}"
    match = _REACT.search(last)
    if match is not None:
        return (f"Thought: I need to use a tool to help me answer the question.\n"
                f"Action: {match.group(1)}\nAction Input: {match.group(2) or '{}'}")
    match = _EXECUTE.search(last)
    if match is not None:
        return f"Let me look it up.\n<execute>\nprint({match.group(1)})\n</execute>"
    return None


class _State:
    def __init__(self, keep_requests: bool = True,
                 on_request: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self.keep_requests = keep_requests
        self.on_request = on_request
        self.ids = itertools.count(1)
        self.responses: dict[str, int] = {}  # stored response id -> its total tokens
        self.cache: set[str] = set()  # anthropic cached prefixes (digests)
        self.lock = threading.Lock()
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def new_id(self, prefix: str) -> str:
        with self.lock:
            return f"{prefix}_{next(self.ids):04d}"


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # one response, no 40 ms delayed-ACK stalls

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return None

    # -- plumbing -----------------------------------------------------------------------

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
              ) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _sse(self, events: list[tuple[str | None, dict[str, Any]]]) -> None:
        chunks = []
        for name, data in events:
            head = f"event: {name}\n" if name else ""
            chunks.append(f"{head}data: {json.dumps(data)}\n\n".encode())
        if self.path.startswith("/v1/chat/"):
            chunks.append(b"data: [DONE]\n\n")
        body = b"".join(chunks)
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802 - stdlib name
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            self._json(400, {"error": {"message": "the body is not a JSON object",
                                       "type": "invalid_request"}})
            return
        state = self.server.state
        if state.keep_requests:
            with state.lock:
                state.requests.append((self.path, body))
        if state.on_request is not None:
            state.on_request(self.path, body)
        path = self.path.split("?", 1)[0]
        if path == "/v1/chat/completions":
            self._chat(body)
        elif path == "/v1/responses":
            self._responses(body)
        elif path == "/v1/responses/compact":
            self._compact(body)
        elif path == "/v1/messages":
            self._messages(body)
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    # -- OpenAI -------------------------------------------------------------------------

    def _openai_too_long(self, model: str, prompt: int, reserved: int) -> bool:
        window = _window(model)
        if prompt + reserved <= window:
            return False
        self._json(400, {"error": {
            "message": (f"This model's maximum context length is {window} tokens. However, "
                        f"you requested {prompt + reserved} tokens ({prompt} in the messages, "
                        f"{reserved} in the completion). Please reduce the length of the "
                        "messages or completion."),
            "type": "invalid_request_error", "param": "messages",
            "code": "context_length_exceeded"}})
        return True

    def _chat(self, body: dict[str, Any]) -> None:
        model = body.get("model", "")
        messages = body.get("messages") or []
        sizes = [stub_tokens(_text_of(m.get("content")) + _text_of(m.get("tool_calls")))
                 + 4 for m in messages]
        prompt = sum(sizes) + 3
        reserved = body.get("max_completion_tokens") or body.get("max_tokens") or 0
        if self._openai_too_long(model, prompt, reserved):
            return
        cached = sum(sizes[:-1]) if len(sizes) >= 3 else 0
        completion = stub_tokens(REPLY)
        usage = {"prompt_tokens": prompt, "completion_tokens": completion,
                 "total_tokens": prompt + completion,
                 "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0}}
        cid = self.server.state.new_id("chatcmpl")
        reply = _structured_reply(body.get("response_format"))
        if not body.get("stream"):
            reply = _text_format_reply(messages) or reply
            message: dict[str, Any] = {"role": "assistant", "content": reply, "refusal": None}
            tools = [t.get("function") for t in body.get("tools") or () if isinstance(t, dict)]
            call = _requested_call(messages, [t for t in tools if isinstance(t, dict)])
            if call is not None:
                message = {"role": "assistant", "content": None, "refusal": None,
                           "tool_calls": [{"id": self.server.state.new_id("call"),
                                           "type": "function",
                                           "function": {"name": call[0],
                                                        "arguments": call[1]}}]}
            self._json(200, {
                "id": cid, "object": "chat.completion", "created": 1_700_000_000,
                "model": f"{model}-2024-07-18" if model == "gpt-4o-mini" else model,
                "choices": [{"index": 0, "finish_reason": "tool_calls" if call else "stop",
                             "logprobs": None, "message": message}],
                "usage": usage, "system_fingerprint": "fp_stub"})
            return
        base = {"id": cid, "object": "chat.completion.chunk", "created": 1_700_000_000,
                "model": model, "system_fingerprint": "fp_stub"}
        events: list[tuple[str | None, dict[str, Any]]] = [
            (None, {**base, "choices": [{"index": 0, "delta": {"role": "assistant",
                                                               "content": ""},
                                         "finish_reason": None}]})]
        for word in REPLY.split(" "):
            events.append((None, {**base, "choices": [{"index": 0,
                                                       "delta": {"content": word + " "},
                                                       "finish_reason": None}]}))
        events.append((None, {**base, "choices": [{"index": 0, "delta": {},
                                                   "finish_reason": "stop"}]}))
        if (body.get("stream_options") or {}).get("include_usage"):
            events.append((None, {**base, "choices": [], "usage": usage}))
        self._sse(events)

    def _compact(self, body: dict[str, Any]) -> None:
        """``responses.compact``: every user message kept as it is, then one compaction item
        standing for everything else (encrypted, as the API's is)."""
        state = self.server.state
        raw = body.get("input")
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
        prompt = sum(stub_tokens(_text_of(it)) + 4 for it in items) + stub_tokens(
            body.get("instructions") or "") + 3
        if self._openai_too_long(body.get("model", ""), prompt, 0):
            return
        kept = [{"type": "message", "id": state.new_id("msg"), "status": "completed",
                 "role": "user", "content": [{"type": "input_text", "text": _text_of(it)}]}
                for it in items
                if (it.get("type") or "message") == "message" and it.get("role") == "user"]
        summary = max(prompt // 8, 1)
        self._json(200, {
            "id": state.new_id("resp"), "object": "response.compaction",
            "created_at": 1_700_000_000,
            "output": [*kept, {"type": "compaction", "id": state.new_id("cmp"),
                               "encrypted_content": "gAAAA" + "x" * 32}],
            "usage": {"input_tokens": prompt, "output_tokens": summary,
                      "total_tokens": prompt + summary,
                      "input_tokens_details": {"cached_tokens": 0},
                      "output_tokens_details": {"reasoning_tokens": 0}}})

    def _responses(self, body: dict[str, Any]) -> None:
        state = self.server.state
        model = body.get("model", "")
        raw = body.get("input")
        items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or [])
        sizes = [stub_tokens(_text_of(it)) + 4 for it in items]
        prompt = sum(sizes) + stub_tokens(body.get("instructions") or "") + 3
        prev = body.get("previous_response_id")
        if prev:
            if prev not in state.responses:
                self._json(404, {"error": {"message": f"Previous response with id '{prev}' "
                                           "not found.", "type": "invalid_request_error",
                                           "param": "previous_response_id",
                                           "code": "previous_response_not_found"}})
                return
            prompt += state.responses[prev]
        reserved = body.get("max_output_tokens") or 0
        window = _window(model)
        if body.get("truncation") == "auto" and prompt + reserved > window:
            # drop items from the middle until it fits (keep the first and the last)
            while len(sizes) > 2 and prompt + reserved > window:
                prompt -= sizes.pop(len(sizes) // 2)
            prompt = min(prompt, window - reserved)
        elif self._openai_too_long(model, prompt, reserved):
            return
        output: list[dict[str, Any]] = []
        for entry in body.get("context_management") or []:
            threshold = entry.get("compact_threshold")
            if entry.get("type") == "compaction" and threshold and prompt > threshold:
                output.append({"type": "compaction", "id": state.new_id("cmp"),
                               "encrypted_content": "gAAAA" + "x" * 32})
                prompt = max(threshold // 4, 1)
        rid = state.new_id("resp")
        completion = stub_tokens(REPLY)
        msg_id = state.new_id("msg")
        text = _structured_reply((body.get("text") or {}).get("format"))
        message = {"type": "message", "id": msg_id, "status": "completed", "role": "assistant",
                   "content": [{"type": "output_text", "text": text, "annotations": [],
                                "logprobs": []}]}
        call = _requested_call(items, body.get("tools"))
        if call is not None:
            name, arguments = call
            message = {"type": "function_call", "id": state.new_id("fc"),
                       "call_id": state.new_id("call"), "name": name,
                       "arguments": arguments, "status": "completed"}
        output.append(message)
        usage = {"input_tokens": prompt, "output_tokens": completion,
                 "total_tokens": prompt + completion,
                 "input_tokens_details": {"cached_tokens": sum(sizes[:-1])
                                          if len(sizes) >= 3 else 0},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        if body.get("store", True):
            with state.lock:
                state.responses[rid] = prompt + completion
        response = {
            "id": rid, "object": "response", "created_at": 1_700_000_000, "status": "completed",
            "model": model, "output": output, "usage": usage, "parallel_tool_calls": True,
            "tool_choice": "auto", "tools": [], "truncation": body.get("truncation", "disabled"),
            "previous_response_id": prev, "instructions": body.get("instructions"),
            "max_output_tokens": body.get("max_output_tokens"), "error": None,
            "incomplete_details": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0,
            "text": {"format": {"type": "text"}}}
        if not body.get("stream"):
            self._json(200, response)
            return
        seq = itertools.count()
        started = {**response, "status": "in_progress", "output": [], "usage": None}
        events: list[tuple[str | None, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "sequence_number": next(seq),
                                  "response": started})]
        index = 0
        whole = output if call is not None else output[:-1]
        for item in whole:  # compaction items and function calls come whole
            events.append(("response.output_item.added", {
                "type": "response.output_item.added", "sequence_number": next(seq),
                "output_index": index, "item": item}))
            events.append(("response.output_item.done", {
                "type": "response.output_item.done", "sequence_number": next(seq),
                "output_index": index, "item": item}))
            index += 1
        if call is not None:
            events.append(("response.completed", {"type": "response.completed",
                                                  "sequence_number": next(seq),
                                                  "response": response}))
            self._sse(events)
            return
        empty = {**message, "status": "in_progress", "content": []}
        part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
        events.append(("response.output_item.added", {
            "type": "response.output_item.added", "sequence_number": next(seq),
            "output_index": index, "item": empty}))
        events.append(("response.content_part.added", {
            "type": "response.content_part.added", "sequence_number": next(seq),
            "output_index": index, "item_id": msg_id, "content_index": 0, "part": part}))
        for word in REPLY.split(" "):
            events.append(("response.output_text.delta", {
                "type": "response.output_text.delta", "sequence_number": next(seq),
                "output_index": index, "item_id": msg_id, "content_index": 0,
                "delta": word if word == REPLY.split(" ")[0] else " " + word,
                "logprobs": []}))
        events.append(("response.output_text.done", {
            "type": "response.output_text.done", "sequence_number": next(seq),
            "output_index": index, "item_id": msg_id, "content_index": 0, "text": REPLY,
            "logprobs": []}))
        events.append(("response.content_part.done", {
            "type": "response.content_part.done", "sequence_number": next(seq),
            "output_index": index, "item_id": msg_id, "content_index": 0,
            "part": {**part, "text": REPLY}}))
        events.append(("response.output_item.done", {
            "type": "response.output_item.done", "sequence_number": next(seq),
            "output_index": index, "item": message}))
        events.append(("response.completed", {"type": "response.completed",
                                              "sequence_number": next(seq),
                                              "response": response}))
        self._sse(events)

    # -- Anthropic ----------------------------------------------------------------------

    def _messages(self, body: dict[str, Any]) -> None:
        state = self.server.state
        model = body.get("model", "")
        system = body.get("system")
        blocks: list[tuple[int, bool]] = []  # (tokens, cache breakpoint after it)
        raw_blocks: list[Any] = []
        sys_blocks = ([{"type": "text", "text": system}] if isinstance(system, str)
                      else list(system or []))
        for b in sys_blocks:
            blocks.append((stub_tokens(_text_of(b)), bool(b.get("cache_control"))))
            raw_blocks.append(b)
        tool_results: list[tuple[int, int]] = []  # (block index, tokens)
        for m in body.get("messages") or []:
            content = m.get("content")
            parts = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for p in parts or []:
                tokens = stub_tokens(_text_of(p)) + 2
                if p.get("type") == "tool_result":
                    tool_results.append((len(blocks), tokens))
                blocks.append((tokens, bool(p.get("cache_control"))))
                raw_blocks.append(p)
        prompt = sum(t for t, _ in blocks) + 3
        window = _window(model)
        if prompt > window:
            self._json(400, {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"prompt is too long: {prompt} tokens > {window} maximum"},
                "request_id": "req_stub"})
            return
        reserved = body.get("max_tokens")
        if isinstance(reserved, int) and prompt + reserved > window:  # the API's wording
            self._json(400, {"type": "error", "error": {
                "type": "invalid_request_error",
                "message": f"input length and `max_tokens` exceed context limit: {prompt} + "
                           f"{reserved} > {window}, decrease input length or `max_tokens` "
                           "and try again"}, "request_id": "req_stub"})
            return
        applied: list[dict[str, Any]] = []
        for edit in (body.get("context_management") or {}).get("edits") or []:
            if edit.get("type") != "clear_tool_uses_20250919":
                continue
            trigger = (edit.get("trigger") or {}).get("value", 100_000)
            keep = (edit.get("keep") or {}).get("value", 3)
            if prompt <= trigger or len(tool_results) <= keep:
                continue
            cleared = tool_results[: len(tool_results) - keep]
            cleared_tokens = sum(t for _, t in cleared)
            prompt -= cleared_tokens
            applied.append({"type": "clear_tool_uses_20250919",
                            "cleared_tool_uses": len(cleared),
                            "cleared_input_tokens": cleared_tokens})
        # prompt caching: the prefix up to the last breakpoint
        last = max((i for i, (_, bp) in enumerate(blocks) if bp), default=None)
        cache_read = cache_write = 0
        if last is not None:
            prefix = sum(t for t, _ in blocks[: last + 1])
            key = hashlib.sha256(json.dumps([model, raw_blocks[: last + 1]],
                                            sort_keys=True).encode()).hexdigest()
            with state.lock:
                if key in state.cache:
                    cache_read = prefix
                else:
                    state.cache.add(key)
                    cache_write = prefix
        uncached = max(prompt - cache_read - cache_write, 0)
        output_tokens = stub_tokens(REPLY)
        usage = {"input_tokens": uncached, "output_tokens": output_tokens,
                 "cache_read_input_tokens": cache_read,
                 "cache_creation_input_tokens": cache_write, "service_tier": "standard"}
        mid = state.new_id("msg")
        message: dict[str, Any] = {
            "id": mid, "type": "message", "role": "assistant", "model": model,
            "content": [{"type": "text", "text": _structured_reply(
                (body.get("output_config") or {}).get("format"))}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": usage}
        if applied or body.get("context_management"):
            message["context_management"] = {"applied_edits": applied}
        if not body.get("stream"):
            self._json(200, message)
            return
        start = {**message, "content": [], "stop_reason": None,
                 "usage": {**usage, "output_tokens": 1}}
        start.pop("context_management", None)
        events: list[tuple[str | None, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": start}),
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "text", "text": ""}}),
        ]
        for i, word in enumerate(REPLY.split(" ")):
            events.append(("content_block_delta", {
                "type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": word if i == 0 else " " + word}}))
        events.append(("content_block_stop", {"type": "content_block_stop", "index": 0}))
        delta: dict[str, Any] = {"type": "message_delta",
                                 "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                                 "usage": {"output_tokens": output_tokens,
                                           "input_tokens": uncached,
                                           "cache_read_input_tokens": cache_read,
                                           "cache_creation_input_tokens": cache_write}}
        if "context_management" in message:
            delta["context_management"] = message["context_management"]
        events.append(("message_delta", delta))
        events.append(("message_stop", {"type": "message_stop"}))
        self._sse(events)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    state: _State


class StubServer:
    """The stub on ``127.0.0.1`` and a free port, served from a background thread.

    ``keep_requests=False`` keeps no request (``requests`` stays empty: a long-running stub's
    memory stays flat); ``on_request(path, body)`` is called on the serving thread for each.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, keep_requests: bool = True,
                 on_request: Callable[[str, dict[str, Any]], None] | None = None) -> None:
        self._server = _Server((host, port), _Handler)
        self._server.state = _State(keep_requests, on_request)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_base_url(self) -> str:
        return f"{self.url}/v1"

    @property
    def anthropic_base_url(self) -> str:
        return self.url

    @property
    def requests(self) -> list[tuple[str, dict[str, Any]]]:
        """(path, JSON body) of every request received, in order."""
        return list(self._server.state.requests)

    def start(self) -> StubServer:
        self._thread = threading.Thread(target=self._server.serve_forever,
                                        kwargs={"poll_interval": 0.05},
                                        name="otel-agent-context-stub", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> StubServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def main() -> None:  # pragma: no cover - manual use and the benchmark
    """``python -m otel_agent_context.instrumentation._stub [port]``: serve until killed;
    prints the URL on the first line."""
    import argparse
    import time

    parser = argparse.ArgumentParser(
        prog="python -m otel_agent_context.instrumentation._stub",
        description="A loopback stub of the OpenAI and Anthropic APIs (tests, benchmarks; "
                    "`otel-agent-context stub` is the command for people); prints its URL.")
    parser.add_argument("port", nargs="?", type=int, default=0, help="0: any free port")
    with StubServer(port=parser.parse_args().port) as stub:
        print(stub.url, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":  # pragma: no cover
    main()
