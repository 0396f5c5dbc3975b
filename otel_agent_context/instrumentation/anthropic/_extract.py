"""Anthropic Messages requests and responses as context."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from opentelemetry.util.genai.types import (
    InputMessage,
    OutputMessage,
    TextPart,
    ToolCallRequestPart,
    ToolCallResponsePart,
)

from ... import _digest
from ..._digest import remember_beside
from ..._enums import ContextKind, InjectionPoint
from ..._folded import Row
from .. import _tokens
from .._common import (
    _HISTORY_SPEC,
    _K_SESSION_HISTORY,
    _K_USER_MESSAGE,
    _PLAIN_BLOCK,
    _PLAIN_TYPES,
    KNOWN_MESSAGES,
    SEG_HISTORY,
    SEG_SYSTEM,
    TEXT_PARTS,
    Accumulator,
    Block,
    Outcome,
    PlainOutcome,
    Request,
    call_row,
    is_text,
    known_message_id,
    make_block,
    message_facts,
    message_id,
    plain_block,
    plain_request,
    plain_row,
    remembered,
    sdk_class,
    sdk_extra,
    short_digest,
    tool_call_id,
    tool_result_id,
)
from ..openai._extract import (
    _NUMBERS,
    _get,
    _int,
    _tool_tokens,
    given,
    json_default,
    media_marker,
    plain_data,
    plain_tool_tokens,
)

PROVIDER = "anthropic"
_HISTORY = InjectionPoint.MESSAGE_HISTORY.value
#: plain strings: an enum attribute lookup per block adds up
_K_COMPUTED_SUMMARY = ContextKind.COMPUTED_SUMMARY.value
_K_SYSTEM_PROMPT = ContextKind.SYSTEM_PROMPT.value
_K_TOOL_RESULT = ContextKind.TOOL_RESULT.value
_P_SYSTEM = InjectionPoint.SYSTEM_PROMPT.value
_FINISH = {"end_turn": "stop", "max_tokens": "length", "stop_sequence": "stop",
           "tool_use": "tool_call", "refusal": "content_filter"}


#: how deep content may nest in content (a tool result's, a document's, a search result's)
#: before a block stands for what it holds: the API takes none this deep, and a deeper
#: request ran the reader out of the interpreter's stack, losing the call's blocks
_MAX_NESTING = 32


def _block_text(block: Any, depth: int = 0) -> str:
    if isinstance(block, str):
        return block
    btype = _get(block, "type")
    if depth > _MAX_NESTING:
        return f"[{btype}]"
    depth += 1
    if btype == "text":
        return str(_get(block, "text") or "")
    if btype in ("tool_use", "server_tool_use"):  # the model's call of a tool (a server's too)
        return f"{_get(block, 'name')}({json.dumps(_get(block, 'input'), default=json_default)})"
    if btype == "tool_result":
        content = _get(block, "content")
        if isinstance(content, str):
            return content
        return "\n".join(_block_text(b, depth) for b in content or ())
    if btype in ("thinking", "redacted_thinking"):
        return str(_get(block, "thinking") or "")
    if btype == "compaction":
        return str(_get(block, "content") or "")
    if btype in ("image", "document"):
        return _source_text(btype, _get(block, "source"), depth)
    if btype == "search_result":
        # a retrieved document given as text: its source (the model cites it), title and
        # text; the same text from two sources is two documents, not a repeat of one
        body = _texts(_get(block, "content"), depth)
        head = [v for v in (_get(block, "source"), _get(block, "title"))
                if isinstance(v, str) and v]
        return "\n".join((*head, body)) if head else body
    if btype == "container_upload":
        return media_marker(btype, block, (("file_id",),))
    if type(btype) is str and btype.endswith("_tool_result"):
        # a server or MCP tool's result: its text when it has one, else the call it answers
        content = _get(block, "content")
        if isinstance(content, str) or (isinstance(content, (list, tuple)) and all(
                _get(b, "type") == "text" for b in content)):
            return _texts(content, depth)
        return media_marker(btype, block, (("tool_use_id",),))
    return f"[{btype}]"


def _texts(content: Any, depth: int) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        return "\n".join(_block_text(b, depth) for b in content)
    return ""


def _source_text(btype: str, source: Any, depth: int) -> str:
    """The text an image's or a document's ``source`` gives the model: a text document's
    own text, else a marker naming the source (``media_marker``: its data, URL or file id)."""
    stype = _get(source, "type")
    if stype == "text":
        data = _get(source, "data")
        if isinstance(data, str):
            return data
    elif stype == "content":
        return _texts(_get(source, "content"), depth)
    return media_marker(btype, source, (("data",), ("url",), ("file_id",)))


def messages_request(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> Request:
    get = kwargs.get
    reserved = _int(get("max_tokens"))
    model, stream, tools, temperature, top_p, stop = (
        get("model"), get("stream"), get("tools"), get("temperature"), get("top_p"),
        get("stop_sequences"))
    if stop is not None:
        stop = given(stop)
    # given's call only for a value (mostly absent)
    req = Request(PROVIDER, model if type(model) is str else given(model), reserved,
                  stream is not None and bool(given(stream)),
                  0 if tools is None else _tool_tokens(tools),
                  {"max_tokens": reserved,
                   "temperature": None if temperature is None else given(temperature),
                   "top_p": None if top_p is None else given(top_p),
                   "top_k": _int(get("top_k")),
                   "stop_sequences": list(stop) if stop else None})
    system = given(get("system"))
    sys_parts: list[Any] = []
    known = KNOWN_MESSAGES.get()
    estimator = _tokens._estimator_key
    system_blocks = [system] if isinstance(system, str) else list(system or ())
    # a framework's ids of its system messages (LangChain's) name their blocks
    names = _framework_names(known, "system", system_blocks) if known else None
    for j, block in enumerate(system_blocks):
        if (type(block) is dict and block.get("type") == "text"
                and type(text := block.get("text")) is str):
            # a text block as a dict (the usual one), without _block_text's and _get's calls
            breakpoint_ = bool(given(block.get("cache_control")))
        else:
            text = _block_text(block)
            breakpoint_ = (bool(given(_get(block, "cache_control")))
                           if not isinstance(block, str) else False)
        named = names.get(j) if names else None
        if capture:
            req.blocks.append(_system_block(text, breakpoint_, True, named))
            sys_parts.append(TextPart(content=text))
            continue
        if type(text) is not str or named:  # a str subclass: its block keeps the text given
            req.blocks.append(_system_block(text, breakpoint_, False, named))
            continue
        # without capture the same block every call: remembered as plain_block's are
        key = (_SYSTEM_BLOCK, text, breakpoint_, estimator)
        found = remembered(key)
        if found is None or not _digest._resolved:
            found = _system_block(text, breakpoint_, False)
            remember_beside(key, text, found)
        req.blocks.append(found)
    messages = list(given(kwargs.get("messages")) or ())
    last_user = -1  # the latest user message that is not only tool results
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if _get(m, "role") == "user" and not _only_tool_results(_get(m, "content")):
            last_user = i
            break
    inputs: list[InputMessage] = []
    append = req.blocks.append
    resolved = _digest._resolved  # if not, each block is built (plain_block checks again)
    i = -1  # a counter, not enumerate's tuple a message
    for m in messages:
        i += 1
        if type(m) is dict:
            try:  # subscripts, not two calls of get: once a message, every call
                role = m["role"]
                content = m["content"]
            except KeyError:
                role, content = m.get("role"), m.get("content")
        else:
            role, content = _get(m, "role"), _get(m, "content")
        if type(content) is str and type(role) is str and not capture:
            # the usual message, a role and a string, read without the general path's
            # lookups: what every call repeats for the whole history
            kind = _K_USER_MESSAGE if i == last_user and role == "user" else _K_SESSION_HISTORY
            if known:
                item_id, tokens, digest = message_facts(role, content)
                item_id = known_message_id(role, content) or item_id
                append(Block(item_id, kind, _HISTORY, SEG_HISTORY, tokens, digest, None,
                             "inline", None, None, None, False, None, content or None))
                continue
            # its remembered block, looked up here (plain_block's lookup without its call)
            found = remembered((_PLAIN_BLOCK, role, content, kind, estimator))
            if found is None or not resolved:
                found = plain_block(role, content, kind, _HISTORY, SEG_HISTORY)
            append(found)
            continue
        role = str(role)
        blocks = [content] if isinstance(content, str) else list(content or ())
        parts: list[Any] = []
        names = _framework_names(known, role, blocks) if known else None
        for j, block in enumerate(blocks):
            append(_content_block(role, i, j, block, i == last_user, req, capture,
                                  names.get(j) if names else None))
            if capture:
                parts.append(_genai_part(block))
        if capture:
            inputs.append(InputMessage(role=role, parts=parts))
    edits = _get(given(kwargs.get("context_management")), "edits")
    if edits:
        req.edits = [dict(e) if isinstance(e, Mapping) else e.model_dump() for e in edits]
    if capture:
        req.genai["input_messages"] = inputs
        req.genai["system_instruction"] = sys_parts
    return req


_SYSTEM_BLOCK = "system block"
#: what an agent's plain request may carry beside its messages: its tool definitions, how
#: the model chooses among them, and sampling parameters (as the general reader records them)
_PLAIN_EXTRAS = frozenset(("tools", "tool_choice", "temperature", "top_p", "top_k",
                           "stop_sequences"))
#: what a plain request (``messages_plain``) may hold, and a plain system block
_PLAIN_REQUEST = frozenset(("model", "max_tokens", "system", "messages", "stream",
                            *_PLAIN_EXTRAS))
_PLAIN_SYSTEM = frozenset(("type", "text", "cache_control"))


def messages_plain(kwargs: dict[str, Any]) -> Request | None:
    """``messages_request((), kwargs, False)`` for a plain request (streaming or not) whose
    system prompt an earlier call read (an agent sends it with every call), its messages
    each a role and a string (remembered, or made as the general reader makes them), with
    or without tool definitions and sampling parameters (``_plain_extras``), without the
    general reader's branches; None for any other request (another key, a value that is
    not a plain one, content blocks, a framework's message ids, a system prompt not seen
    before), which ``messages_request`` reads. Nothing here can hold an iterator (plain
    values only), so nothing needs settling (``_materialize``)."""
    if not kwargs.keys() <= _PLAIN_REQUEST:
        return None
    get = kwargs.get
    model, reserved, system, messages, stream = (
        get("model"), get("max_tokens"), get("system"), get("messages"), get("stream"))
    if (type(model) is not str or type(reserved) is not int or type(messages) is not list
            or not (stream is None or type(stream) is bool) or KNOWN_MESSAGES.get()):
        return None
    estimator = _tokens._estimator_key
    blocks: list[Block] = []
    append = blocks.append
    if type(system) is list:
        for block in system:
            if (type(block) is not dict or block.get("type") != "text"
                    or type(text := block.get("text")) is not str
                    or not block.keys() <= _PLAIN_SYSTEM):
                return None
            cache = block.get("cache_control")
            if cache is not None:
                if type(cache) is not dict:
                    return None
                for value in cache.values():
                    if type(value) not in _PLAIN_TYPES:
                        return None
            found = remembered((_SYSTEM_BLOCK, text, bool(cache), estimator))
            if found is None:
                return None
            append(found)
    elif type(system) is str:
        found = remembered((_SYSTEM_BLOCK, system, False, estimator))
        if found is None:
            return None
        append(found)
    elif system is not None:
        return None
    return plain_request(PROVIDER, model, reserved, stream, _plain_extras(kwargs, reserved),
                         messages, None, blocks, _content_rows)


_MESSAGE = frozenset(("role", "content"))
_TEXT_PART = frozenset(("type", "text"))
_TOOL_USE_PART = frozenset(("type", "id", "name", "input"))
_TOOL_RESULT_PART = frozenset(("type", "tool_use_id", "content"))
_TOOL_ERROR_PART = frozenset(("type", "tool_use_id", "content", "is_error"))
_SDK_TYPES = "anthropic.types."
#: (module, name) of the SDK's response blocks an agent gives back (keys made once: a
#: string made per call is hashed per call)
_SDK_TEXT_BLOCK = (_SDK_TYPES + "text_block", "TextBlock")
_SDK_TOOL_USE_BLOCK = (_SDK_TYPES + "tool_use_block", "ToolUseBlock")


def _tool_use_row(call_id: Any, name: Any, arguments: Any) -> tuple[Row, str, str | None] | None:
    """A tool use block's row, as ``_content_block`` makes its block, or None (an empty id
    names no call there)."""
    if (type(call_id) is not str or not call_id or type(name) is not str
            or not plain_data(arguments)):
        return None
    text = f"{name}({json.dumps(arguments, default=json_default)})"  # as the general reader
    return call_row(f"tool_use:{call_id}", _K_SESSION_HISTORY, text), text, call_id


def _sdk_field(block: Any, kind: str, name: str) -> Any:
    """Field ``name`` of the SDK's content block if it is still of ``kind`` and marks no
    cache breakpoint (set after the SDK built it: its models take fields they do not
    declare), else None."""
    try:
        if not is_text(block.type, kind) or sdk_extra(block, "cache_control") is not None:
            return None
        return getattr(block, name)
    except AttributeError:  # a field deleted
        return None


def _content_rows(m: Any) -> list[tuple[Row, str, str | None]] | None:
    """The rows of an agent's message whose content is a list of blocks
    (``remembered_history``'s ``other``), as ``messages_request`` makes their blocks: the
    assistant's text and tool use blocks (dicts, or the SDK's as a response gave them
    back), or a user message of tool results in strings; None for any other (a cache
    breakpoint, an image, thinking, a user's text beside the results)."""
    if type(m) is not dict or m.keys() != _MESSAGE:
        return None
    role, content = m["role"], m["content"]
    if type(content) is not list or not content:
        return None
    rows: list[tuple[Row, str, str | None]] = []
    if role == "user":  # only tool results: never the latest user message
        for part in content:
            if type(part) is not dict or part.get("type") != "tool_result":
                return None
            keys, call_id, text = part.keys(), part.get("tool_use_id"), part.get("content")
            if (type(call_id) is not str or not call_id or type(text) is not str or not (
                    keys == _TOOL_RESULT_PART
                    or keys == _TOOL_ERROR_PART and type(part["is_error"]) is bool)):
                return None
            rows.append((call_row(f"tool_result:{call_id}", _K_TOOL_RESULT, text), text,
                         call_id))
        return rows
    if role != "assistant":
        return None
    text_block = sdk_class(*_SDK_TEXT_BLOCK)
    tool_use_block = sdk_class(*_SDK_TOOL_USE_BLOCK)
    for part in content:
        kind = type(part)
        row: tuple[Row, str, str | None] | None
        if kind is dict:
            keys, ptype = part.keys(), part.get("type")
            if ptype == "text" and keys == _TEXT_PART and type(text := part["text"]) is str:
                row = plain_row("assistant", text, *_HISTORY_SPEC), text, None
            elif ptype == "tool_use" and keys == _TOOL_USE_PART:
                row = _tool_use_row(part["id"], part["name"], part["input"])
            else:
                return None
        elif kind is text_block and text_block is not None:
            text = _sdk_field(part, "text", "text")
            if type(text) is not str:
                return None
            row = plain_row("assistant", text, *_HISTORY_SPEC), text, None
        elif kind is tool_use_block and tool_use_block is not None:
            call_id = _sdk_field(part, "tool_use", "id")
            try:
                row = None if call_id is None else _tool_use_row(call_id, part.name, part.input)
            except AttributeError:  # a field deleted
                return None
        else:
            return None
        if row is None:
            return None
        rows.append(row)
    return rows


def _plain_extras(kwargs: dict[str, Any], reserved: int) -> tuple[int, dict[str, Any]] | None:
    """The tool definitions' token estimate and the request's GenAI fields, as
    ``messages_request`` takes them, for a plain request's :data:`_PLAIN_EXTRAS`; None when
    one of them is not a plain value (the general path settles an iterator first)."""
    if kwargs.keys().isdisjoint(_PLAIN_EXTRAS):  # a request without tools or sampling
        return 0, {"max_tokens": reserved, "temperature": None, "top_p": None,
                   "top_k": None, "stop_sequences": None}
    get = kwargs.get
    tools, choice, temperature, top_p, top_k, stop = (
        get("tools"), get("tool_choice"), get("temperature"), get("top_p"), get("top_k"),
        get("stop_sequences"))
    tool_tokens = 0 if tools is None else plain_tool_tokens(tools)
    if (tool_tokens is None or not (choice is None or plain_data(choice))
            or not (temperature is None or type(temperature) in _NUMBERS)
            or not (top_p is None or type(top_p) in _NUMBERS)
            or not (top_k is None or type(top_k) is int)
            or not (stop is None or type(stop) is list and all(type(s) is str for s in stop))):
        return None
    return tool_tokens, {"max_tokens": reserved, "temperature": temperature, "top_p": top_p,
                         "top_k": top_k, "stop_sequences": list(stop) if stop else None}


def _system_block(text: str, breakpoint_: bool, capture: bool, item_id: str | None = None
                  ) -> Block:
    return make_block(item_id or f"system:{short_digest(text)}", _K_SYSTEM_PROMPT, text, capture,
                      _P_SYSTEM, SEG_SYSTEM, cache_breakpoint=breakpoint_)


def _only_tool_results(content: Any) -> bool:
    return (isinstance(content, (list, tuple)) and bool(content)
            and all(_get(b, "type") == "tool_result" for b in content))


def _framework_names(known: dict[tuple[str, str], list[Any]], role: str, blocks: list[Any]
                     ) -> dict[int, str]:
    """Which text blocks of one message (or of the system prompt) a framework's message ids
    (``KNOWN_MESSAGES``) name, by block index: a run of blocks of a message of several text
    parts (LangChain's ``ChatAnthropic`` sends each part as a block, and merges consecutive
    messages into one) the message's, its first block by its id and the others ``<id>/2``,
    ``/3``...; else a block by its text. Each id taken once, in order, from ``known``
    (``KNOWN_MESSAGES``'s value)."""
    texts = [(j, text) for j, b in enumerate(blocks)
             if (isinstance(b, str) or _get(b, "type") == "text") and (text := _block_text(b))]
    out: dict[int, str] = {}
    k = 0
    while k < len(texts):
        j, text = texts[k]
        span, named = 1, None
        for n, (parts, mid) in enumerate(known.get((TEXT_PARTS + role, text)) or ()):
            if tuple(t for _, t in texts[k:k + len(parts)]) == parts:
                del known[(TEXT_PARTS + role, text)][n]
                joined = known.get((role, "".join(parts)))
                if joined and mid in joined:  # the same message, named by its joined text
                    joined.remove(mid)
                span, named = len(parts), mid
                break
        if named is None:
            named = known_message_id(role, text)
        if named is not None:
            out[j] = named
            for n in range(1, span):
                out[texts[k + n][0]] = f"{named}/{n + 1}"
        k += span
    return out


def _content_block(role: str, i: int, j: int, block: Any, latest_user: bool, req: Request,
                   capture: bool, name: str | None = None) -> Block:
    """One block of a message; ``name``: the framework's id of its message, if it names it
    (:func:`_framework_names`)."""
    btype = "text" if isinstance(block, str) else _get(block, "type")
    text = _block_text(block)
    breakpoint_ = not isinstance(block, str) and bool(given(_get(block, "cache_control")))
    if btype == "tool_result":
        call_id = str(_get(block, "tool_use_id"))
        return make_block(tool_result_id(call_id), _K_TOOL_RESULT, text,
                          capture, _HISTORY, SEG_HISTORY, tool_call_id=call_id,
                          cache_breakpoint=breakpoint_)
    if btype == "tool_use":
        call_id = str(_get(block, "id"))
        req.tool_names[call_id] = str(_get(block, "name"))
        return make_block(tool_call_id("tool_use", call_id), _K_SESSION_HISTORY, text,
                          capture, _HISTORY, SEG_HISTORY, tool_call_id=call_id,
                          cache_breakpoint=breakpoint_)
    if btype == "compaction":
        req.compacted = True
        return make_block(f"compaction:{short_digest(text)}",
                          _K_COMPUTED_SUMMARY, text, capture, _HISTORY,
                          SEG_HISTORY, content_mode="summary", cache_breakpoint=breakpoint_)
    kind = (_K_USER_MESSAGE if role == "user" and latest_user
            else _K_SESSION_HISTORY)
    item_id = name or message_id(role, text)
    return make_block(item_id, kind, text, capture, _HISTORY, SEG_HISTORY,
                      cache_breakpoint=breakpoint_)


def _as_sent(value: Any, depth: int = 0) -> Any:
    """``value`` with every mapping in it a dict, as the SDK sends it (util-genai copies a
    tool call's arguments, and a ``MappingProxyType`` cannot be copied)."""
    if depth > _MAX_NESTING:
        return value
    if isinstance(value, Mapping):
        return {k: _as_sent(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_sent(v, depth + 1) for v in value]
    return value


def _genai_part(block: Any) -> Any:
    btype = "text" if isinstance(block, str) else _get(block, "type")
    if btype == "tool_use":
        arguments = _get(block, "input")
        if not plain_data(arguments):
            arguments = _as_sent(arguments)
        return ToolCallRequestPart(arguments=arguments, name=str(_get(block, "name")),
                                   id=_get(block, "id"))
    if btype == "tool_result":
        return ToolCallResponsePart(response=_block_text(block), id=_get(block, "tool_use_id"))
    return TextPart(content=_block_text(block))


def _usage(out: Outcome, usage: Any) -> None:
    if usage is None:
        return
    uncached = _get(usage, "input_tokens")
    read = _get(usage, "cache_read_input_tokens")
    write = _get(usage, "cache_creation_input_tokens")
    if uncached is not None or read is not None or write is not None:
        out.input_tokens = (uncached or 0) + (read or 0) + (write or 0)
    out.cache_read = read
    out.cache_write = write
    output = _get(usage, "output_tokens")
    if output is not None:
        out.output_tokens = output


def _edits(out: Outcome, management: Any) -> None:
    for edit in _get(management, "applied_edits") or ():
        out.applied_edits.append(dict(edit) if isinstance(edit, Mapping) else edit.model_dump())


def _declared_or_extra(result: Any, key: str) -> Any:
    """``_get`` for a field a response model may not declare (``context_management``, beta):
    reading an undeclared one goes through pydantic's ``__getattr__`` and an AttributeError,
    ~40x a declared field, on every call; a pydantic model's declared fields and extras are
    read directly instead."""
    fields = getattr(type(result), "__pydantic_fields__", None)
    if not isinstance(fields, dict) or key in fields:
        return _get(result, key)
    extra = getattr(result, "__pydantic_extra__", None)
    return extra.get(key) if isinstance(extra, dict) else None


def messages_response(result: Any, capture: bool) -> Outcome:
    try:  # an SDK Message: its fields as attributes, without a _get each
        if isinstance(result, dict):
            raise AttributeError
        rid, model, stop, usage = result.id, result.model, result.stop_reason, result.usage
    except AttributeError:  # a dict, or another object: a missing field is None
        rid, model, stop, usage = (_get(result, "id"), _get(result, "model"),
                                   _get(result, "stop_reason"), _get(result, "usage"))
    out = Outcome(response_id=rid, response_model=model)
    if stop:
        out.finish_reasons = [_FINISH.get(str(stop), str(stop))]
    _usage(out, usage)
    _edits(out, _declared_or_extra(result, "context_management"))
    if capture:
        out.output_messages = [OutputMessage(
            role="assistant", parts=[_genai_part(b) for b in _get(result, "content") or ()],
            finish_reason=out.finish_reasons[0] if out.finish_reasons else "stop")]
    return out


def messages_plain_response(result: Any) -> PlainOutcome | None:
    """``messages_response(result, False)``'s fields (``Api.plain_response``) for an SDK
    ``Message`` with no context management applied; None for anything else (a dict, an
    object without these fields, applied edits: ``messages_response`` reads it)."""
    if type(result) is dict:
        return None
    try:
        rid, model, stop, usage = result.id, result.model, result.stop_reason, result.usage
        uncached, read, write, output = (
            usage.input_tokens, usage.cache_read_input_tokens,
            usage.cache_creation_input_tokens, usage.output_tokens)
    except AttributeError:  # no usage, or not the SDK's Message
        return None
    if _declared_or_extra(result, "context_management") is not None:
        return None
    return (rid, model, [_FINISH.get(str(stop), str(stop))] if stop else None,
            None if uncached is None and read is None and write is None
            else (uncached or 0) + (read or 0) + (write or 0),
            output, read, write, None, None)


class MessagesAccumulator(Accumulator):
    """Raw ``create(stream=True)`` events: message_start, content deltas, message_delta."""

    def __init__(self, capture: bool) -> None:
        super().__init__(capture)
        self._text: list[str] = []

    def add(self, chunk: Any) -> None:
        etype = _get(chunk, "type")
        out = self.outcome
        if etype == "message_start":
            message = _get(chunk, "message")
            out.response_id = _get(message, "id")
            out.response_model = _get(message, "model")
            _usage(out, _get(message, "usage"))
        elif etype == "message_delta":
            stop = _get(_get(chunk, "delta"), "stop_reason")
            if stop:
                out.finish_reasons = [_FINISH.get(str(stop), str(stop))]
            usage = _get(chunk, "usage")
            if usage is not None:
                # cumulative totals; input counts only when present
                if _get(usage, "input_tokens") is not None:
                    _usage(out, usage)
                elif _get(usage, "output_tokens") is not None:
                    out.output_tokens = _get(usage, "output_tokens")
            _edits(out, _get(chunk, "context_management"))
        elif etype == "message_stop":
            self.terminal = True
        elif etype == "content_block_delta" and self.capture:
            text = _get(_get(chunk, "delta"), "text")
            if text:
                self._text.append(text)

    def result(self) -> Outcome:
        out = self.outcome
        if self.capture:
            out.output_messages = [OutputMessage(
                role="assistant", parts=[TextPart(content="".join(self._text))],
                finish_reason=out.finish_reasons[0] if out.finish_reasons else "stop")]
        return out


def messages_is_stream(kwargs: dict[str, Any]) -> bool:
    return bool(given(kwargs.get("stream")))


def snapshot_outcome(stream: Any, capture: bool) -> Outcome | None:
    """The outcome of a ``messages.stream()`` helper, from its accumulated message."""
    try:
        message = stream.current_message_snapshot
    except Exception:  # no message_start arrived
        return None
    return messages_response(message, capture)
