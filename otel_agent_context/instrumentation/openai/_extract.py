"""OpenAI requests and responses as context: chat completions and the Responses API."""

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
from ..._enums import ContextKind, InjectionPoint, OverflowStrategy
from ..._folded import Row
from .. import _tokens
from .._common import (
    _K_SESSION_HISTORY,
    _K_USER_MESSAGE,
    _PLAIN_BLOCK,
    _PLAIN_TYPES,
    KNOWN_MESSAGES,
    SEG_DEVELOPER,
    SEG_HISTORY,
    SEG_SYSTEM,
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
    settle_message,
    short_digest,
    tool_call_id,
    tool_result_id,
)
from .._tokens import estimate_tokens

PROVIDER = "openai"

_SYSTEM = (ContextKind.SYSTEM_PROMPT.value, InjectionPoint.SYSTEM_PROMPT.value, SEG_SYSTEM)
_DEVELOPER = (ContextKind.DEVELOPER_INSTRUCTION.value, InjectionPoint.DEVELOPER_PROMPT.value,
              SEG_DEVELOPER)
_HISTORY_POINT = InjectionPoint.MESSAGE_HISTORY.value
#: plain strings: an enum attribute lookup per block adds up
_K_COMPUTED_SUMMARY = ContextKind.COMPUTED_SUMMARY.value
_K_TOOL_RESULT = ContextKind.TOOL_RESULT.value
#: (kind, injection point, segment) of a plain message by its role: a prompt, the latest
#: user message, any other message of the history
_PROMPTS = {"system": _SYSTEM, "developer": _DEVELOPER}
_LATEST_USER = (_K_USER_MESSAGE, _HISTORY_POINT, SEG_HISTORY)
_IN_HISTORY = (_K_SESSION_HISTORY, _HISTORY_POINT, SEG_HISTORY)
#: the same by the roles of chat_request's short path, the latest user message aside
_PLAIN_SPECS = {**_PROMPTS, "user": _IN_HISTORY, "assistant": _IN_HISTORY}
_PLAIN_KINDS = {role: spec[0] for role, spec in _PLAIN_SPECS.items()}
_FINISH = {"completed": "stop", "max_output_tokens": "length", "content_filter": "content_filter"}


#: types a request value usually has: never a sentinel (a builtin type's ``__name__`` is
#: a new string each read)
_VALUE_TYPES = frozenset({str, int, float, bool, list, dict, tuple})


def given(value: Any) -> Any:
    """``None`` for the SDK's NOT_GIVEN / omit sentinels."""
    if value is None or (type(value) not in _VALUE_TYPES
                         and type(value).__name__ in ("NotGiven", "Omit")):
        return None
    return value


def json_default(value: Any) -> Any:
    """``json.dumps``' ``default`` for what an application puts in a request: a mapping
    that is not a dict as the dict the SDK sends of it, anything else as ``str`` makes it."""
    return dict(value) if isinstance(value, Mapping) else str(value)


#: whether objects of a type that is not a dict are mappings (``MappingProxyType``,
#: ``UserDict``, an application's own), which the SDKs send as they send a dict: the ABC
#: check once a type, not once a read of an SDK's object's field
_MAPPING_TYPES: dict[type, bool] = {}


_mapping_type = _MAPPING_TYPES.get


def _is_mapping(kind: type) -> bool:
    """Whether ``kind`` is a mapping, remembered (``_get`` looks it up itself first)."""
    if len(_MAPPING_TYPES) >= 256:  # types made at run time: bounded
        _MAPPING_TYPES.clear()
    found = _MAPPING_TYPES[kind] = issubclass(kind, Mapping)
    return found


def _get(obj: Any, key: str) -> Any:
    try:
        if isinstance(obj, dict):
            return obj.get(key)
        kind = type(obj)
        mapping = _mapping_type(kind)  # looked up here, not in a call: every field read
        if mapping is None:
            mapping = _is_mapping(kind)
        if mapping:
            return obj.get(key)  # a key, never an attribute (``UserDict.data``)
        return getattr(obj, key, None)  # an SDK's object: its field
    except Exception:  # an application object that fails to be read (a property, a
        # mapping's get): read as absent, the call's other records kept
        return None


def _last_user(messages: list[Any]) -> int:
    """The index of the latest user message (-1: none), scanned from the end."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if (m.get("role") if type(m) is dict else _get(m, "role")) == "user":
            return i
    return -1


#: where a content part that is not text names what it carries (its data, URL or file id),
#: by its type: the first of these paths (keys, one inside the other) that holds a string
_MEDIA_REFS: dict[str, tuple[tuple[str, ...], ...]] = {
    "image_url": (("image_url", "url"), ("image_url",)),
    "input_image": (("image_url",), ("file_id",)),
    "input_audio": (("input_audio", "data"), ("data",)),
    "input_file": (("file_id",), ("file_url",), ("file_data",)),
    "file": (("file", "file_id"), ("file", "file_data")),
}


def media_marker(ptype: str, part: Any, paths: tuple[tuple[str, ...], ...]) -> str:
    """What a part that is not text stands as in its block's text: ``[<type> <keyed short
    digest of what names it>]``, so two images are two items and the same one sent again is
    one (its data, URL or file id is never written: a signed URL or a file id can be as
    private as text); ``[<type>]`` when nothing names it."""
    for path in paths:
        ref = part
        for key in path:
            ref = _get(ref, key)
        if isinstance(ref, str) and ref:
            return f"[{ptype} {short_digest(ref)}]"
    return f"[{ptype}]"


def _text_parts(content: list[Any]) -> str:
    """The text parts of a content list, joined as a framework names its message (LangChain's
    ``message_text``: strings and parts with a string ``text``, nothing between them)."""
    return "".join(p if isinstance(p, str) else p["text"] for p in content if isinstance(p, str)
                   or (isinstance(p, dict) and isinstance(p.get("text"), str)))


def _known_id(role: str, content: Any, text: str) -> str | None:
    """A framework's own id of this message (``KNOWN_MESSAGES``), else None. A message of
    parts is looked up by its text parts alone, joined as the framework names it (an image is
    no text to it), never by the reader's text, which another message of that text would
    own; a ``developer`` message may be the framework's system message (LangChain sends one
    so to reasoning models)."""
    if not KNOWN_MESSAGES.get():
        return None
    key = _text_parts(content) if isinstance(content, list) else text
    found = known_message_id(role, key)
    if found is None and role == "developer":
        found = known_message_id("system", key)
    return found


def text_of(content: Any) -> str:
    """The text of a message content: a string, or the text parts of a list."""
    content = given(content)
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
                continue
            text = _get(part, "text")
            if isinstance(text, str):
                out.append(text)
            else:
                ptype = _get(part, "type")
                paths = _MEDIA_REFS.get(ptype) if type(ptype) is str else None
                if paths is not None:
                    out.append(media_marker(ptype, part, paths))
        return "\n".join(out)
    text = _get(content, "text")
    return text if isinstance(text, str) else str(content)


def _int(value: Any) -> int | None:
    if type(value) is int or value is None:  # the usual values, without given's call
        return value  # type: ignore[no-any-return]
    value = given(value)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_SAMPLING_KEYS = frozenset({"temperature", "top_p", "frequency_penalty", "presence_penalty",
                            "seed", "stop"})


def _common_genai(kwargs: dict[str, Any], reserved: int | None) -> dict[str, Any]:
    if kwargs.keys().isdisjoint(_SAMPLING_KEYS):  # none given (the usual request)
        return {"max_tokens": reserved}  # a None is not set: no entry for the others
    # one literal, each parameter read once: given's call only for a value
    get = kwargs.get
    temperature, top_p, frequency, presence, seed, stop = (
        get("temperature"), get("top_p"), get("frequency_penalty"), get("presence_penalty"),
        get("seed"), get("stop"))
    if temperature is not None:
        temperature = given(temperature)
    if top_p is not None:
        top_p = given(top_p)
    if frequency is not None:
        frequency = given(frequency)
    if presence is not None:
        presence = given(presence)
    if stop is not None:
        stop = given(stop)
        stop = [stop] if isinstance(stop, str) else (list(stop) if stop else None)
    return {"max_tokens": reserved, "temperature": temperature, "top_p": top_p,
            "frequency_penalty": frequency, "presence_penalty": presence,
            "seed": _int(seed), "stop_sequences": stop}


def _tool_tokens(tools: Any) -> int:
    tools = given(tools)
    if not tools:
        return 0
    listed = type(tools) is list
    if listed:
        found = _remembered_tool_tokens(tools)
        if found is not None:
            return found
    estimator = _tokens._estimator_key  # read before estimating: a switch meanwhile
    data = True
    try:
        try:
            text = json.dumps(list(tools))
        except (TypeError, ValueError):  # not JSON data: what ``str`` makes of the rest
            data = False
            text = json.dumps(list(tools), default=json_default)
        tokens = estimate_tokens(text)
    except (TypeError, ValueError):
        return 0
    if listed and data:
        _remember_tool_tokens(text, tokens, estimator)
    return tokens


#: Token estimates of tool definitions an agent sent lately, newest first: (the definitions
#: as their JSON reads back, the estimator's key, the estimate). An agent sends the same
#: definitions with every call, and encoding them was the costliest part of reading its
#: request (~60 us for 15 tools of 13K characters, against ~3 us to compare them with what
#: was encoded). Definitions that compare equal (``==``) get the estimate of what was
#: encoded: numbers equal across types or signs (``1``, ``1.0``, ``True``; ``0.0``,
#: ``-0.0``), the same keys in another order (which an exact tokenizer may count otherwise)
#: or a nested mapping of another class equal to JSON data keep it.
#: Only definitions encoded twice are kept (``_TOOL_TEXTS``): a router sending another set
#: each call pays no more than encoding them. Nothing of the application's is held.
_TOOL_ESTIMATES: list[tuple[Any, int | None, int]] = []
#: the JSON of definitions encoded once lately, newest first
_TOOL_TEXTS: list[str] = []
_TOOL_SETS = 8  # each list's length
#: the JSON of one set of definitions, past which none is kept (what is kept of a set,
#: its JSON read back, takes ~18x its characters in memory)
_TOOL_SET_MAX_CHARS = 2**16


def _remembered_tool_tokens(tools: list[Any]) -> int | None:
    """The estimate of definitions equal to ones encoded lately, or None."""
    estimator = _tokens._estimator_key
    for snapshot, key, tokens in _TOOL_ESTIMATES:  # a list replaced whole, never changed
        try:
            if key == estimator and tools == snapshot:
                return tokens
        except Exception:  # an application's object whose comparison fails: encode it
            return None
    return None


def _remember_tool_tokens(text: str, tokens: int, estimator: int | None) -> None:
    """Keep the estimate of definitions encoded as ``text`` (JSON data) once they were
    encoded before: the lists are replaced whole (another thread reads them unlocked)."""
    global _TOOL_ESTIMATES, _TOOL_TEXTS
    if len(text) > _TOOL_SET_MAX_CHARS or _tokens._estimator_key != estimator:
        return  # too large, or the estimator was switched while the estimate was made
    if text not in _TOOL_TEXTS:
        _TOOL_TEXTS = [text, *_TOOL_TEXTS[:_TOOL_SETS - 1]]
        return
    _TOOL_TEXTS = [t for t in _TOOL_TEXTS if t != text]
    _TOOL_ESTIMATES = [(json.loads(text), estimator, tokens),
                       *_TOOL_ESTIMATES[:_TOOL_SETS - 1]]


#: the numbers a sampling parameter is, in a plain request
_NUMBERS = frozenset({int, float})


def plain_tool_tokens(tools: Any) -> int | None:
    """:func:`_tool_tokens` of a plain request's tool definitions: a list of JSON data (a
    function's schema, a provider's built-in tool), whose encoding without a fallback for
    other objects is the one ``_tool_tokens`` makes; None for anything else (an iterator,
    an SDK object, a value JSON cannot hold), which the general path settles and reads."""
    if type(tools) is not list:
        return None
    if not tools:
        return 0
    if not set(map(type, tools)) <= _DICTS:  # a definition of another type compared equal
        return None
    found = _remembered_tool_tokens(tools)
    if found is not None:
        return found
    estimator = _tokens._estimator_key
    try:
        text = json.dumps(tools)
        tokens = estimate_tokens(text)
    except (TypeError, ValueError):
        return None
    _remember_tool_tokens(text, tokens, estimator)
    return tokens


_DICTS = frozenset({dict})


def plain_data(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` is JSON data of dicts with string keys, lists and scalars, a few
    levels deep (a ``tool_choice``): nothing the general path would settle."""
    kind = type(value)
    if kind in _PLAIN_TYPES:
        return True
    if depth > 3:
        return False
    if kind is dict:
        return all(type(k) is str and plain_data(v, depth + 1) for k, v in value.items())
    if kind is list:
        return all(plain_data(v, depth + 1) for v in value)
    return False


#: what an agent's plain chat or Responses request may carry beside its messages: its tool
#: definitions, how the model chooses among them, and sampling parameters (recorded as the
#: general reader records them; the rest is the SDK's alone)
_PLAIN_EXTRAS = frozenset({"tools", "tool_choice", "parallel_tool_calls", *_SAMPLING_KEYS})


def _plain_extras(kwargs: dict[str, Any], reserved: int | None
                  ) -> tuple[int, dict[str, Any]] | None:
    """The tool definitions' token estimate and the request's GenAI fields, as the general
    readers take them (``_tool_tokens``, ``_common_genai``), for a plain request's
    :data:`_PLAIN_EXTRAS`; None when one of them is not a plain value (an iterator among
    them is settled by the general path before anything reads it)."""
    if kwargs.keys().isdisjoint(_PLAIN_EXTRAS):  # a request without tools or sampling
        return 0, {"max_tokens": reserved}
    get = kwargs.get
    tools, choice, parallel, stop, seed = (get("tools"), get("tool_choice"),
                                           get("parallel_tool_calls"), get("stop"),
                                           get("seed"))
    tool_tokens = 0 if tools is None else plain_tool_tokens(tools)
    if (tool_tokens is None or not (choice is None or plain_data(choice))
            or not (parallel is None or type(parallel) is bool)
            or not (seed is None or type(seed) is int)
            or not (stop is None or type(stop) is str or (
                type(stop) is list and all(type(s) is str for s in stop)))):
        return None
    for key in ("temperature", "top_p", "frequency_penalty", "presence_penalty"):
        value = get(key)
        if value is not None and type(value) not in _NUMBERS:
            return None
    return tool_tokens, _common_genai(kwargs, reserved)


#: roles whose string message takes chat_request's short path (a tool result carries an id)
_PLAIN_ROLES = frozenset({"user", "assistant", "system", "developer"})


def _history_kind(role: str | None, is_latest_user: bool) -> str:
    if role == "user" and is_latest_user:
        return _K_USER_MESSAGE
    return _K_SESSION_HISTORY


# ---------------------------------------------------------------------------------------
# chat completions


def chat_request(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> Request:
    get = kwargs.get
    messages = get("messages")
    # a list is settled here, as it is read (the Api's ``settles``), in a copy that the
    # SDK gets (the application's list is left as it is); another copy is read
    source: list[Any] | None = None
    if type(messages) is list:
        source = kwargs["messages"] = list(messages)
    messages = list(source) if source is not None else list(given(messages) or ())
    failed: list[BaseException] = []
    reserved = _int(get("max_completion_tokens")) or _int(get("max_tokens"))
    model, stream, tools = get("model"), get("stream"), get("tools")
    req = Request(PROVIDER, model if type(model) is str else given(model), reserved,
                  stream is not None and bool(given(stream)),
                  0 if tools is None else _tool_tokens(tools), _common_genai(kwargs, reserved))
    n = get("n")
    if n is not None:
        n = _int(n)
        if n and n != 1:
            req.genai["request_choice_count"] = n
    last_user = _last_user(messages)
    inputs: list[InputMessage] = []
    system: list[Any] = []
    append = req.blocks.append
    known = KNOWN_MESSAGES.get()
    if known and source is not None:
        # a framework's ids are taken as messages are read: all settled first, so a read
        # that an iterator stops takes none (as before the reader settled them itself)
        for j in range(len(source)):
            settle_message(source, j, failed)
        messages, source = list(source), None
    lookup = not capture and not known
    estimator = _tokens._estimator_key
    resolved = _digest._resolved  # if not, each block is built (plain_block checks again)
    i = -1  # a counter, not enumerate's tuple a message
    for m in messages:
        i += 1
        if lookup and type(m) is dict and len(m) == 2:
            # a role and a string alone (the usual history): its remembered block, looked
            # up here (subscripts, no call: a history is read again with every call)
            try:
                role = m["role"]
                text = m["content"]
            except KeyError:
                pass
            else:
                if (type(text) is str and type(role) is str
                        and (kind := _PLAIN_KINDS.get(role)) is not None):
                    if i == last_user:
                        kind = _K_USER_MESSAGE
                    block = remembered((_PLAIN_BLOCK, role, text, kind, estimator))
                    if block is None or not resolved:
                        block = plain_block(role, text, *(
                            _LATEST_USER if i == last_user else _PLAIN_SPECS[role]))
                    append(block)
                    continue
        if source is not None and type(m) not in _PLAIN_TYPES:
            m = settle_message(source, i, failed)
        if (not capture and type(m) is dict and type(text := m.get("content")) is str
                and type(role := m.get("role")) is str and role in _PLAIN_ROLES
                and not m.get("tool_calls")):
            # the usual message, a role and a string, read without the general path's
            # lookups: what every call repeats for the whole history
            kind, point, seg = _PROMPTS.get(role) or (
                _LATEST_USER if role == "user" and i == last_user else _IN_HISTORY)
            if known:
                item_id, tokens, digest = message_facts(role, text)
                item_id = _known_id(role, text, text) or item_id
                append(Block(item_id, kind, point, seg, tokens, digest, None, "inline", None,
                             None, None, False, None, text or None))
            else:
                append(plain_block(role, text, kind, point, seg))
            continue
        role = _get(m, "role")
        content = _get(m, "content")
        text = text_of(content)
        calls = given(_get(m, "tool_calls")) or ()
        call_text = ""
        for call in calls:
            fn = _get(call, "function")
            req.tool_names[str(_get(call, "id"))] = str(_get(fn, "name"))
            call_text += f"\n{_get(fn, 'name')}({_get(fn, 'arguments') or ''})"
        legacy = given(_get(m, "function_call"))  # the deprecated single call: its tokens
        if legacy is not None:
            call_text += f"\n{_get(legacy, 'name')}({_get(legacy, 'arguments') or ''})"
        full = text + call_text
        if role == "system":
            kind, point, seg = _SYSTEM
        elif role == "developer":
            kind, point, seg = _DEVELOPER
        elif role == "tool":
            kind, point, seg = _K_TOOL_RESULT, _HISTORY_POINT, SEG_HISTORY
        else:
            kind, point, seg = _history_kind(role, i == last_user), _HISTORY_POINT, SEG_HISTORY
        call_id = _get(m, "tool_call_id") if role == "tool" else None
        item_id = (tool_result_id(call_id) if call_id
                   else (known and _known_id(str(role), content, text))
                   or message_id(str(role), full))
        req.blocks.append(make_block(item_id, kind, full, capture, point, seg,
                                     tool_call_id=call_id))
        if capture:
            if role in ("system", "developer"):
                system.append(TextPart(content=text))
            elif role == "tool":
                inputs.append(InputMessage(role="tool", parts=[
                    ToolCallResponsePart(response=text, id=call_id)]))
            else:
                parts: list[Any] = [TextPart(content=text)] if text else []
                for call in calls:
                    fn = _get(call, "function")
                    parts.append(ToolCallRequestPart(arguments=_get(fn, "arguments"),
                                                     name=str(_get(fn, "name")),
                                                     id=_get(call, "id")))
                inputs.append(InputMessage(role=str(role), parts=parts))
    if capture:
        req.genai["input_messages"] = inputs
        req.genai["system_instruction"] = system
    return req


#: ``stream_options`` is the SDK's alone (whether the last chunk carries the usage): no
#: reader reads it, but the general path settles an iterator in it (``_materialize``), so
#: only a dict of plain values is plain
_PLAIN_CHAT = frozenset(("model", "messages", "max_completion_tokens", "max_tokens", "stream",
                         "stream_options", *_PLAIN_EXTRAS))


_TOOL_MESSAGE = frozenset(("role", "tool_call_id", "content"))
_CALLING = frozenset(("role", "tool_calls"))
_CALLING_WITH_TEXT = frozenset(("role", "content", "tool_calls"))
#: what the SDK's ``model_dump()`` of its assistant message adds, which ``chat_request``
#: does not read: plain when None (the annotations: an empty list)
_DUMPED = frozenset(("refusal", "annotations", "audio", "function_call"))
_FUNCTION_CALL = frozenset(("id", "type", "function"))
_FUNCTION = frozenset(("name", "arguments"))


def _chat_call_rows(m: Any) -> list[tuple[Row, str, str | None]] | None:
    """The row of an agent's chat message that is not a dict of a role and a string
    (``remembered_history``'s ``other``), as ``chat_request`` makes its block: an assistant
    message of function calls (its text the calls' names and arguments after any content;
    as a dict, its ``model_dump()`` too, or the SDK's message as a response gave it back),
    or a tool result in a string; None for any other."""
    if type(m) is not dict:
        return _sdk_message_rows(m)
    role = m.get("role")
    if role == "tool":
        call_id, text = m.get("tool_call_id"), m.get("content")
        if (m.keys() != _TOOL_MESSAGE or type(call_id) is not str or not call_id
                or type(text) is not str):
            return None
        return [(call_row(f"tool_result:{call_id}", _K_TOOL_RESULT, text), text, call_id)]
    if role != "assistant":
        return None
    keys: Any = m.keys()
    if not keys.isdisjoint(_DUMPED):
        for key in keys & _DUMPED:
            value = m[key]
            if not (value is None or key == "annotations" and type(value) is list
                    and not value):
                return None
        keys = keys - _DUMPED
    content, calls = m.get("content"), m.get("tool_calls")
    if (keys not in (_CALLING, _CALLING_WITH_TEXT)
            or not (content is None or type(content) is str)
            or not (calls is None or type(calls) is list)):
        return None
    full = content or ""
    for call in calls or ():
        if type(call) is not dict or call.keys() != _FUNCTION_CALL:
            return None
        fn, call_id = call["function"], call["id"]
        if (type(fn) is not dict or fn.keys() != _FUNCTION or type(call["type"]) is not str
                or type(call_id) is not str):
            return None
        name, arguments = fn["name"], fn["arguments"]
        if type(name) is not str or type(arguments) is not str:
            return None
        full += f"\n{name}({arguments})"
    return [(plain_row("assistant", full, *_IN_HISTORY), full, None)]


def _sdk_message_rows(m: Any) -> list[tuple[Row, str, str | None]] | None:
    """The row of the SDK's assistant message an agent appends to its history as the API
    gave it back (``response.choices[0].message``), read as ``chat_request`` reads it (its
    role, content and function calls; the refusal, audio and annotations not), or None."""
    message = sdk_class("openai.types.chat.chat_completion_message", "ChatCompletionMessage")
    if message is None or not isinstance(m, message):
        return None
    try:
        role, content, calls = m.role, m.content, m.tool_calls
        if (not is_text(role, "assistant") or not (content is None or type(content) is str)
                or not (calls is None or type(calls) is list)
                or m.function_call is not None):  # the deprecated call: the general path's
            return None
        full = content or ""
        for call in calls or ():
            fn, call_id = call.function, call.id
            name, arguments = fn.name, fn.arguments
            if type(call_id) is not str or type(name) is not str or type(arguments) is not str:
                return None
            full += f"\n{name}({arguments})"
    except AttributeError:  # a call of another kind (a custom tool's), another object
        return None
    return [(plain_row("assistant", full, *_IN_HISTORY), full, None)]


#: what a request may carry that the general readers never read (the SDK sends it alone:
#: headers, storage, output options), beside the keys a one-pass reader reads; an agent
#: framework sends most of them, most as the SDK's omit
_UNREAD = frozenset(("extra_headers", "extra_query", "timeout", "store", "metadata", "user",
                     "safety_identifier", "service_tier", "prompt_cache_key",
                     "prompt_cache_retention", "prompt_cache_options", "top_logprobs",
                     "reasoning", "text", "include", "background", "stream_options",
                     "max_tool_calls", "reasoning_effort", "logprobs", "verbosity",
                     "modalities", "response_format"))
_SENTINELS = ("NotGiven", "Omit")


def _read_keys(kwargs: dict[str, Any], plain: frozenset[str]) -> dict[str, Any] | None:
    """``kwargs`` (a request with keys beyond ``plain``) as the general reader reads it:
    without the SDK's NOT_GIVEN and omit (which ``given`` reads as absent), a None beside
    the ``plain`` keys, and the :data:`_UNREAD` keys of plain data (nothing the general path
    would settle); None when another key has a value."""
    read = {}
    for key, value in kwargs.items():
        kind = type(value)
        if kind not in _VALUE_TYPES and value is not None and kind.__name__ in _SENTINELS:
            continue
        if key in plain:
            read[key] = value
        elif value is not None and not (key in _UNREAD and plain_data(value)):
            return None
    return read


def chat_plain(kwargs: dict[str, Any]) -> Request | None:
    """``chat_request((), kwargs, False)`` for a plain request (``Api.plain``): the model,
    the output sizes, whether it streams, and messages each a role among system, developer,
    user and assistant and a string (remembered: an agent sends its history again with every
    call; a new one made as the general reader makes it), with or without tool definitions
    and sampling parameters (``_plain_extras``), beside the SDK's omit values and keys the
    general reader never reads (``_read_keys``: an agent framework's request); None for any
    other request (another key, a value that is not a plain one, a framework's message
    ids), which ``chat_request`` reads."""
    if KNOWN_MESSAGES.get():
        return None
    if not kwargs.keys() <= _PLAIN_CHAT:
        read = _read_keys(kwargs, _PLAIN_CHAT)
        if read is None:
            return None
        kwargs = read
    get = kwargs.get
    model, messages = get("model"), get("messages")
    completion, legacy, stream = get("max_completion_tokens"), get("max_tokens"), get("stream")
    if (type(model) is not str or type(messages) is not list
            or not (completion is None or type(completion) is int)
            or not (legacy is None or type(legacy) is int)
            or not (stream is None or type(stream) is bool)):
        return None
    options = get("stream_options")
    if options is not None and (type(options) is not dict or not all(
            type(v) in _PLAIN_TYPES for v in options.values())):
        return None
    reserved = completion or legacy
    return plain_request(PROVIDER, model, reserved, stream, _plain_extras(kwargs, reserved),
                         messages, _PLAIN_SPECS, other=_chat_call_rows)


def chat_response(result: Any, capture: bool) -> Outcome:
    try:  # an SDK ChatCompletion: its fields as attributes, without a _get each
        if isinstance(result, dict):
            raise AttributeError
        rid, model, choices, usage, fingerprint = (
            result.id, result.model, result.choices, result.usage, result.system_fingerprint)
    except AttributeError:  # a dict, or another object: a missing field is None
        rid, model, choices, usage, fingerprint = (
            _get(result, "id"), _get(result, "model"), _get(result, "choices"),
            _get(result, "usage"), _get(result, "system_fingerprint"))
    out = Outcome(rid, model)
    choices = choices or ()
    out.finish_reasons = [str(_get(c, "finish_reason") or "error") for c in choices]
    _chat_usage(out, usage)
    if isinstance(fingerprint, str) and fingerprint:
        out.attributes[_FINGERPRINT] = fingerprint
    if capture:
        out.output_messages = [
            OutputMessage(role="assistant",
                          parts=[TextPart(content=text_of(_get(_get(c, "message"), "content")))],
                          finish_reason=str(_get(c, "finish_reason") or "error"))
            for c in choices]
    return out


def chat_plain_response(result: Any) -> PlainOutcome | None:
    """``chat_response(result, False)``'s fields (``Api.plain_response``) for an SDK
    ``ChatCompletion``; None for anything else (a dict, an object without these fields:
    ``chat_response`` reads it)."""
    if type(result) is dict:
        return None
    try:
        rid, model, choices, usage, fingerprint = (
            result.id, result.model, result.choices, result.usage, result.system_fingerprint)
        reasons = [str(c.finish_reason or "error") for c in choices or ()]
        if usage is None:
            tokens = output = read = write = reasoning = None
        else:
            tokens, output, details, completion = (
                usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details,
                usage.completion_tokens_details)
            read, write = ((None, None) if details is None
                           else (details.cached_tokens, details.cache_write_tokens))
            reasoning = None if completion is None else completion.reasoning_tokens
    except AttributeError:  # not the SDK's objects
        return None
    return (rid, model, reasons, tokens, output, read, write, reasoning,
            {_FINGERPRINT: fingerprint} if isinstance(fingerprint, str) and fingerprint
            else None)


_FINGERPRINT = "openai.response.system_fingerprint"


def _chat_usage(out: Outcome, usage: Any) -> None:
    if usage is None:
        return
    try:  # an SDK CompletionUsage: its fields as attributes, without a _get each
        if isinstance(usage, dict):
            raise AttributeError
        out.input_tokens, out.output_tokens, details, completion = (
            usage.prompt_tokens, usage.completion_tokens, usage.prompt_tokens_details,
            usage.completion_tokens_details)
    except AttributeError:  # a dict, or another object: a missing field is None
        out.input_tokens = _get(usage, "prompt_tokens")
        out.output_tokens = _get(usage, "completion_tokens")
        details = _get(usage, "prompt_tokens_details")
        completion = _get(usage, "completion_tokens_details")
    # each read sets all three: a stream's later usage chunk replaces an earlier one's
    if details is None:  # without a _get of None for each
        out.cache_read = out.cache_write = None
    else:
        out.cache_read = _get(details, "cached_tokens")
        out.cache_write = _get(details, "cache_write_tokens")
    out.reasoning_tokens = None if completion is None else _get(completion, "reasoning_tokens")


class ChatAccumulator(Accumulator):
    def __init__(self, capture: bool) -> None:
        super().__init__(capture)
        self._text: dict[int, list[str]] = {}
        self._finish: dict[int, str] = {}

    def add(self, chunk: Any) -> None:
        """One chunk: the first one's id and model, each choice's finish reason (and text,
        under capture), the usage. An SDK chunk's fields are read as attributes (a chunk
        of a stream is read on the application's thread between its reads: ~5x cheaper
        than through :func:`_get` per field); anything else, a dict or an object without
        them, through :func:`_get` (a missing field is None)."""
        try:
            choices = chunk.choices
            usage = chunk.usage
        except AttributeError:  # a dict, or another chunk type
            self._add(chunk)
            return
        out = self.outcome
        if out.response_id is None:
            out.response_id = getattr(chunk, "id", None)
            out.response_model = getattr(chunk, "model", None)
        if choices:
            capture = self.capture
            for choice in choices:
                try:
                    reason = choice.finish_reason
                except AttributeError:
                    reason = _get(choice, "finish_reason")
                if reason or capture:
                    self._choice(choice, reason)
        if usage is not None:
            _chat_usage(out, usage)

    def _choice(self, choice: Any, reason: Any) -> None:
        idx = _get(choice, "index") or 0
        if reason:
            self._finish[idx] = str(reason)
        if self.capture:
            content = _get(_get(choice, "delta"), "content")
            if content:
                self._text.setdefault(idx, []).append(content)

    def _add(self, chunk: Any) -> None:
        out = self.outcome
        if out.response_id is None:
            out.response_id = _get(chunk, "id")
            out.response_model = _get(chunk, "model")
        for choice in _get(chunk, "choices") or ():
            self._choice(choice, _get(choice, "finish_reason"))
        usage = _get(chunk, "usage")
        if usage is not None:
            _chat_usage(out, usage)

    def result(self) -> Outcome:
        out = self.outcome
        out.finish_reasons = [self._finish[i] for i in sorted(self._finish)]
        if self.capture:
            out.output_messages = [
                OutputMessage(role="assistant", parts=[TextPart(content="".join(parts))],
                              finish_reason=self._finish.get(i, "stop"))
                for i, parts in sorted(self._text.items())]
        return out


def chat_is_stream(kwargs: dict[str, Any]) -> bool:
    return bool(given(kwargs.get("stream")))


# ---------------------------------------------------------------------------------------
# responses


#: the API's type, as the GenAI instrumentor records it (at the request: a refused call too)
_RESPONSES_API = {"openai.api.type": "responses"}


def responses_request(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> Request:
    reserved = _int(kwargs.get("max_output_tokens"))
    truncation = given(kwargs.get("truncation"))
    req = Request(provider=PROVIDER, model=given(kwargs.get("model")), reserved_output=reserved,
                  stream=bool(given(kwargs.get("stream"))),
                  tool_tokens=_tool_tokens(kwargs.get("tools")),
                  overflow_strategy=(OverflowStrategy.TRUNCATE_MIDDLE.value
                                     if truncation == "auto" else OverflowStrategy.REJECT.value),
                  genai=_common_genai(kwargs, reserved))
    req.attributes = _RESPONSES_API
    inputs: list[InputMessage] = []
    system: list[Any] = []
    prompt = _stored_prompt(given(kwargs.get("prompt")))
    if prompt is not None:  # a template stored with the API: its messages come from there
        kind, point, seg = _SYSTEM
        req.blocks.append(make_block(f"prompt:{prompt}", kind, None, False, point, seg,
                                     content_mode="ref", content_ref=f"openai:prompts/{prompt}"))
    instructions = given(kwargs.get("instructions"))
    if isinstance(instructions, str) and instructions:
        req.blocks.append(_instructions_block(instructions, capture))
        if capture:
            system.append(TextPart(content=instructions))
    prev = given(kwargs.get("previous_response_id"))
    if isinstance(prev, str) and prev:
        req.genai["previous_response_id"] = prev
        req.blocks.append(make_block(
            f"response:{prev}", _K_SESSION_HISTORY, None, False,
            _HISTORY_POINT, SEG_HISTORY, content_mode="ref", tokens=None, response_id=prev,
            content_ref=f"openai:responses/{prev}"))
    conversation = _conversation_id(given(kwargs.get("conversation")))
    if conversation is not None:
        # the API puts the conversation's stored items before the input: one block naming
        # them, as a previous response is; the conversation is the call's, as the official
        # instrumentor records it
        req.genai["conversation_id"] = conversation
        req.blocks.append(make_block(
            f"conversation:{conversation}", _K_SESSION_HISTORY, None, False, _HISTORY_POINT,
            SEG_HISTORY, content_mode="ref", tokens=None,
            content_ref=f"openai:conversations/{conversation}"))
    raw = given(kwargs.get("input"))
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or ())
    last_user = _last_user(items)
    append = req.blocks.append
    plain = not capture and not KNOWN_MESSAGES.get()  # a framework's ids: _response_item's
    for i, it in enumerate(items):
        if (plain and type(it) is dict and type(text := it.get("content")) is str
                and type(role := it.get("role")) is str and it.get("id") is None
                and (it.get("type") or "message") == "message"):
            # the usual input message, a role and a string without an id: as
            # _response_item reads it, remembered (see chat_request)
            append(plain_block(role, text, *(_PROMPTS.get(role) or (
                _LATEST_USER if role == "user" and i == last_user else _IN_HISTORY))))
            continue
        block, message = _response_item(it, i == last_user, req, capture)
        if block is not None:
            req.blocks.append(block)
        if message is not None:
            if message.role in ("system", "developer"):
                system.extend(message.parts)
            else:
                inputs.append(message)
    if capture:
        req.genai["input_messages"] = inputs
        req.genai["system_instruction"] = system
    return req


def _conversation_id(conversation: Any) -> str | None:
    """The id a Responses ``conversation`` names (its id, or ``{"id": ...}``), else None."""
    found = conversation if isinstance(conversation, str) else _get(conversation, "id")
    return found if isinstance(found, str) and found else None


def _stored_prompt(prompt: Any) -> str | None:
    """``<id>`` or ``<id>@<version>`` of a Responses ``prompt`` (a stored template), else
    None. Its variables are content: never recorded (their text reaches the model only
    through the template)."""
    if prompt is None:
        return None
    found, version = _get(prompt, "id"), given(_get(prompt, "version"))
    if not (isinstance(found, str) and found):
        return None
    if type(version) is int:  # the API takes a string; the SDK sends a number as given
        version = str(version)
    return f"{found}@{version}" if isinstance(version, str) and version else found


_INSTRUCTIONS_BLOCK = "instructions block"


def _instructions_block(text: str, capture: bool) -> Block:
    """The block of a request's ``instructions``; without content capture the same block
    every call, remembered as :func:`plain_block`'s are (an agent sends them with every
    call)."""
    if capture or type(text) is not str:  # a str subclass: its block keeps the text as given
        return _new_instructions_block(text, capture)
    key = (_INSTRUCTIONS_BLOCK, text, _tokens._estimator_key)
    found = remembered(key)
    if found is None or not _digest._resolved:
        found = _new_instructions_block(text, False)
        remember_beside(key, text, found)
    return found  # type: ignore[no-any-return]


def _new_instructions_block(text: str, capture: bool) -> Block:
    kind, point, seg = _SYSTEM
    return make_block(f"instructions:{short_digest(text)}", kind, text, capture, point, seg)


_PLAIN_RESPONSES = frozenset(("model", "input", "instructions", "max_output_tokens", "stream",
                              *_PLAIN_EXTRAS))


def responses_plain(kwargs: dict[str, Any]) -> Request | None:
    """``responses_request((), kwargs, False)`` for a plain request (``Api.plain``, as
    :func:`chat_plain`): the model, the output size, whether it streams, instructions an
    earlier call read, and input messages each a role among system, developer, user and
    assistant and a string (or the input as one string), with or without tool definitions
    and sampling parameters (``_plain_extras``), beside the SDK's omit values and keys the
    general reader never reads (``_read_keys``: an agent framework's request); None for any
    other request (a previous response, truncation, a conversation, items of other types,
    ids, instructions not seen before), which ``responses_request`` reads."""
    if KNOWN_MESSAGES.get():
        return None
    if not kwargs.keys() <= _PLAIN_RESPONSES:
        read = _read_keys(kwargs, _PLAIN_RESPONSES)
        if read is None:
            return None
        kwargs = read
    get = kwargs.get
    model, items, instructions, reserved, stream = (
        get("model"), get("input"), get("instructions"), get("max_output_tokens"),
        get("stream"))
    if type(items) is str:
        items = [{"role": "user", "content": items}]
    if (type(model) is not str or type(items) is not list
            or not (reserved is None or type(reserved) is int)
            or not (stream is None or type(stream) is bool)):
        return None
    blocks: list[Block] = []
    if type(instructions) is str:
        if instructions:
            found = remembered((_INSTRUCTIONS_BLOCK, instructions, _tokens._estimator_key))
            if found is None:
                return None
            blocks.append(found)
    elif instructions is not None:
        return None
    req = plain_request(PROVIDER, model, reserved, stream, _plain_extras(kwargs, reserved),
                        items, _PLAIN_SPECS, blocks, _responses_call_rows)
    if req is not None:
        req.attributes = _RESPONSES_API
    return req


_FUNCTION_CALL_ITEM = frozenset(("type", "call_id", "name", "arguments"))
_FUNCTION_OUTPUT_ITEM = frozenset(("type", "call_id", "output"))
#: what an item the API gave back may carry beside its fields (``_response_item`` reads
#: neither)
_ITEM_EXTRAS = frozenset(("id", "status"))
#: what the SDK's ``model_dump()`` of a function call adds, None when unset (read by
#: neither reader)
_ITEM_DUMPED = frozenset(("namespace", "caller", "async_", "async"))


def _responses_call_rows(it: Any) -> list[tuple[Row, str, str | None]] | None:
    """The row of an agent's Responses input item that is not a role and a string
    (``remembered_history``'s ``other``), as ``_response_item`` makes its block: a function
    call, or its output in a string; None for any other."""
    if type(it) is not dict:
        return _sdk_item_rows(it)
    itype, call_id = it.get("type"), it.get("call_id")
    if itype == "message":
        return _output_message_rows(it)
    if type(call_id) is not str or not call_id:  # an empty id names no call there
        return None
    keys: Any = it.keys()
    if not keys.isdisjoint(_ITEM_EXTRAS):
        if not all(type(it.get(k)) is str for k in keys & _ITEM_EXTRAS):
            return None
        keys = keys - _ITEM_EXTRAS
    if not keys.isdisjoint(_ITEM_DUMPED):
        if not all(it.get(k) is None for k in keys & _ITEM_DUMPED):
            return None
        keys = keys - _ITEM_DUMPED
    if itype == "function_call":
        name, arguments = it.get("name"), it.get("arguments")
        if keys != _FUNCTION_CALL_ITEM or type(name) is not str or type(arguments) is not str:
            return None
        text = f"{name}({arguments})"
        return [(call_row(f"tool_call:{call_id}", _K_SESSION_HISTORY, text), text, call_id)]
    if itype == "function_call_output":
        output = it.get("output")
        if keys != _FUNCTION_OUTPUT_ITEM or type(output) is not str:
            return None
        return [(call_row(f"tool_result:{call_id}", _K_TOOL_RESULT, output), output, call_id)]
    return None


#: an output message the API gave back, as a dict (the SDK's ``model_dump()``, an agent
#: framework's input list): the fields it has, and those it may have, None or a string
_OUTPUT_MESSAGE = frozenset(("id", "type", "role", "content"))
_OUTPUT_MESSAGE_MAY = frozenset(("status", "phase"))
#: an output text part: the fields it has, and those it may have (plain lists, or None)
_OUTPUT_TEXT = frozenset(("type", "text"))
_OUTPUT_TEXT_MAY = frozenset(("annotations", "logprobs"))


def _output_message_rows(it: dict[str, Any]) -> list[tuple[Row, str, str | None]] | None:
    """The row of an assistant's output message given back as a dict, its content output
    text parts, read as ``_response_item`` reads it (by its own id, the parts' text
    joined); None for any other message (a refusal, another role, another field, ...)."""
    keys: Any = it.keys()
    if not keys >= _OUTPUT_MESSAGE:
        return None
    if keys != _OUTPUT_MESSAGE:
        extra = keys - _OUTPUT_MESSAGE
        if not extra <= _OUTPUT_MESSAGE_MAY or not all(
                it[k] is None or type(it[k]) is str for k in extra):
            return None
    item_id, content = it["id"], it["content"]
    if (not is_text(it["type"], "message") or not is_text(it["role"], "assistant")
            or type(item_id) is not str or not item_id or type(content) is not list):
        return None
    texts = []
    for part in content:
        if type(part) is not dict or not is_text(part.get("type"), "output_text"):
            return None
        text = part.get("text")
        pkeys: Any = part.keys()
        if type(text) is not str or not pkeys >= _OUTPUT_TEXT:
            return None
        if pkeys != _OUTPUT_TEXT:  # nothing the general path would settle in the rest
            extra = pkeys - _OUTPUT_TEXT
            if not extra <= _OUTPUT_TEXT_MAY or not all(
                    part[k] is None or (type(part[k]) is list and plain_data(part[k]))
                    for k in extra):
                return None
        texts.append(text)
    text = "\n".join(texts)
    return [(call_row(item_id, _K_SESSION_HISTORY, text, True), text, None)]


_SDK_ITEMS = "openai.types.responses."
#: (module, name) of the SDK's output items an agent gives back (keys made once: a string
#: made per call is hashed per call)
_SDK_FUNCTION_CALL = (_SDK_ITEMS + "response_function_tool_call", "ResponseFunctionToolCall")
_SDK_OUTPUT_MESSAGE = (_SDK_ITEMS + "response_output_message", "ResponseOutputMessage")
_SDK_OUTPUT_TEXT = (_SDK_ITEMS + "response_output_text", "ResponseOutputText")


def _sdk_item_rows(it: Any) -> list[tuple[Row, str, str | None]] | None:
    """The row of an item of a response's ``output`` an agent appends to its input as the
    SDK gave it back (a function call, the assistant's message of output text), read as
    ``_response_item`` reads it; None for any other (reasoning, a refusal, ...)."""
    kind = type(it)
    try:
        if kind is sdk_class(*_SDK_FUNCTION_CALL):
            itype, call_id, name, arguments = it.type, it.call_id, it.name, it.arguments
            # a role set after the SDK built it: the general reader may take it for the
            # latest user message
            if (not is_text(itype, "function_call") or sdk_extra(it, "role") is not None
                    or type(call_id) is not str or not call_id
                    or type(name) is not str or type(arguments) is not str):
                return None
            text = f"{name}({arguments})"
            return [(call_row(f"tool_call:{call_id}", _K_SESSION_HISTORY, text), text,
                     call_id)]
        if kind is sdk_class(*_SDK_OUTPUT_MESSAGE):
            item_id, itype, role, content = it.id, it.type, it.role, it.content
            part_type = sdk_class(*_SDK_OUTPUT_TEXT)
            if (not is_text(itype, "message") or not is_text(role, "assistant")
                    or type(item_id) is not str or not item_id or type(content) is not list
                    or part_type is None):
                return None
            texts = []
            for part in content:
                if type(part) is not part_type or type(text := part.text) is not str:
                    return None
                texts.append(text)
            text = "\n".join(texts)
            return [(call_row(item_id, _K_SESSION_HISTORY, text, True), text, None)]
    except AttributeError:  # not the fields of the SDK known here
        return None
    return None


def _dumped(value: Any) -> Any:
    """``value`` with the SDK's models in it as the dicts the SDK sends of them."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(value, (list, tuple)):
        return [_dumped(v) for v in value]
    return value


def _response_item(it: Any, latest_user: bool, req: Request, capture: bool
                   ) -> tuple[Block | None, InputMessage | None]:
    itype = _get(it, "type") or "message"
    role = _get(it, "role")
    if itype == "message":
        content = _get(it, "content")
        text = text_of(content)
        if role == "system":
            kind, point, seg = _SYSTEM
        elif role == "developer":
            kind, point, seg = _DEVELOPER
        else:
            kind, point, seg = _history_kind(role, latest_user), _HISTORY_POINT, SEG_HISTORY
        # a framework's own id of the message first (the one its records use), then the
        # API's (an item it gave back), then one from the role and text
        item_id = (_known_id(str(role), content, text)
                   or _get(it, "id") or message_id(str(role), text))
        msg = InputMessage(role=str(role), parts=[TextPart(content=text)]) if capture else None
        return make_block(item_id, kind, text, capture, point, seg), msg
    if itype == "function_call":
        call_id = str(_get(it, "call_id"))
        name = str(_get(it, "name"))
        req.tool_names[call_id] = name
        text = f"{name}({_get(it, 'arguments') or ''})"
        msg = (InputMessage(role="assistant", parts=[ToolCallRequestPart(
            arguments=_get(it, "arguments"), name=name, id=call_id)]) if capture else None)
        return make_block(tool_call_id("tool_call", call_id), _K_SESSION_HISTORY, text,
                          capture, _HISTORY_POINT, SEG_HISTORY, tool_call_id=call_id), msg
    if type(itype) is str and itype.endswith("_call") and _get(it, "call_id"):
        # another tool's call (a custom tool's input, a computer or shell action): named by
        # its call, as its output is, its text what the model sent the tool
        call_id = str(_get(it, "call_id"))
        name = _get(it, "name")
        name = name if isinstance(name, str) else itype
        req.tool_names[call_id] = name
        sent = next((v for k in ("input", "arguments", "action", "actions", "operation")
                     if (v := _get(it, k)) is not None), "")
        if not isinstance(sent, str):  # an action (or a batch of them): as the SDK sends it
            sent = json.dumps(_dumped(sent), default=json_default)
        text = f"{name}({sent})"
        msg = (InputMessage(role="assistant", parts=[ToolCallRequestPart(
            arguments=sent, name=name, id=call_id)]) if capture else None)
        return make_block(tool_call_id("tool_call", call_id), _K_SESSION_HISTORY, text,
                          capture, _HISTORY_POINT, SEG_HISTORY, tool_call_id=call_id), msg
    if type(itype) is str and itype.endswith("_call_output"):
        # a tool's result (a function's; a computer-use screenshot, a custom or shell tool's
        # output): its call's result, named by the call, its text or what its image carries
        call_id = str(_get(it, "call_id"))
        output = _get(it, "output")
        if isinstance(output, str):
            text = output
        elif itype == "function_call_output" or isinstance(output, (list, tuple)):
            text = text_of(output)
        else:
            text = media_marker(str(_get(output, "type") or itype), output,
                                (("image_url",), ("file_id",)))
        msg = (InputMessage(role="tool", parts=[ToolCallResponsePart(response=text, id=call_id)])
               if capture else None)
        return make_block(tool_result_id(call_id), _K_TOOL_RESULT, text,
                          capture, _HISTORY_POINT, SEG_HISTORY, tool_call_id=call_id), msg
    if itype == "compaction":
        req.compacted = True
        cid = _get(it, "id") or short_digest(str(_get(it, "encrypted_content")))
        return make_block(f"compaction:{cid}", _K_COMPUTED_SUMMARY, None,
                          False, _HISTORY_POINT, SEG_HISTORY, content_mode="opaque",
                          tokens=None, content_ref=f"openai:compaction/{cid}"), None
    if itype == "item_reference":
        ref = str(_get(it, "id"))
        return make_block(f"item:{ref}", _K_SESSION_HISTORY, None, False,
                          _HISTORY_POINT, SEG_HISTORY, content_mode="ref", tokens=None,
                          content_ref=f"openai:items/{ref}"), None
    # reasoning and other items: history, by their text if any
    text = text_of(_get(it, "content") or _get(it, "summary"))
    iid = _get(it, "id") or short_digest(itype, text)
    return make_block(f"{itype}:{iid}", _K_SESSION_HISTORY, text, capture,
                      _HISTORY_POINT, SEG_HISTORY), None


def responses_response(result: Any, capture: bool) -> Outcome:
    out = Outcome(response_id=_get(result, "id"), response_model=_get(result, "model"),
                  attributes={"openai.api.type": "responses"})
    status = _get(result, "status")
    reason = _get(_get(result, "incomplete_details"), "reason")
    out.finish_reasons = [_FINISH.get(str(reason or status), str(reason or status or "stop"))]
    usage = _get(result, "usage")
    if usage is not None:
        out.input_tokens = _get(usage, "input_tokens")
        out.output_tokens = _get(usage, "output_tokens")
        out.cache_read = _get(_get(usage, "input_tokens_details"), "cached_tokens")
        out.cache_write = _get(_get(usage, "input_tokens_details"), "cache_write_tokens")
        out.reasoning_tokens = _get(_get(usage, "output_tokens_details"), "reasoning_tokens")
    texts: list[str] = []
    for item in _get(result, "output") or ():
        itype = _get(item, "type")
        if itype == "compaction":
            out.compactions.append(str(_get(item, "id")))
        elif itype == "message" and capture:
            texts.extend(_get(c, "text") or "" for c in _get(item, "content") or ())
    if capture:
        out.output_messages = [OutputMessage(role="assistant",
                                             parts=[TextPart(content="".join(texts))],
                                             finish_reason=out.finish_reasons[0])]
    return out


def responses_plain_response(result: Any) -> PlainOutcome | None:
    """``responses_response(result, False)``'s fields (``Api.plain_response``) for an SDK
    ``Response`` without a compaction item; None for anything else (a dict, an object
    without these fields, a compaction: ``responses_response`` reads it)."""
    if type(result) is dict:
        return None
    try:
        rid, model, status, details, usage, output = (
            result.id, result.model, result.status, result.incomplete_details, result.usage,
            result.output)
        for item in output or ():
            if item.type == "compaction":
                return None
        reason = None if details is None else details.reason
        reasons = [_FINISH.get(str(reason or status), str(reason or status or "stop"))]
        if usage is None:
            tokens = output_tokens = read = write = reasoning = None
        else:
            tokens, output_tokens, read_details, output_details = (
                usage.input_tokens, usage.output_tokens, usage.input_tokens_details,
                usage.output_tokens_details)
            # fields the server may leave out: None, as the general reader reads them (_get)
            read = _get(read_details, "cached_tokens")
            write = _get(read_details, "cache_write_tokens")
            reasoning = _get(output_details, "reasoning_tokens")
    except AttributeError:  # not the SDK's objects
        return None
    return (rid, model, reasons, tokens, output_tokens, read, write, reasoning,
            _RESPONSES_API)


class ResponsesAccumulator(Accumulator):
    """The final response arrives whole in ``response.completed`` (or incomplete/failed)."""

    _FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})

    def add(self, chunk: Any) -> None:
        etype = _get(chunk, "type")
        if etype in self._FINAL:
            self.outcome = responses_response(_get(chunk, "response"), self.capture)
            self.terminal = True
        elif etype == "response.created" and self.outcome.response_id is None:
            response = _get(chunk, "response")
            self.outcome.response_id = _get(response, "id")
            self.outcome.response_model = _get(response, "model")


responses_is_stream = chat_is_stream


def compact_request(args: tuple[Any, ...], kwargs: dict[str, Any], capture: bool) -> Request:
    """``responses.compact``: read as a Responses request; the user messages are the blocks
    the API gives back as they are (everything else becomes one compaction item)."""
    req = responses_request(args, kwargs, capture)
    req.compaction_call = True
    raw = given(kwargs.get("input"))
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else list(raw or ())
    offset = len(req.blocks) - len(items)  # instructions and a previous response come first
    req.kept = frozenset(offset + i for i, it in enumerate(items)
                         if (_get(it, "type") or "message") == "message"
                         and _get(it, "role") == "user")
    return req


def compact_response(result: Any, capture: bool) -> Outcome:
    """A ``CompactedResponse``: its usage, and the compaction item it ends with."""
    out = responses_response(result, capture)
    out.finish_reasons = []
    out.output_messages = None
    return out


def compact_is_stream(kwargs: dict[str, Any]) -> bool:
    return False
