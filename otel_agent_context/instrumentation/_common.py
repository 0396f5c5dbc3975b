"""What the LLM client instrumentors share: one model call's context lifecycle.

A provider module turns a request into a :class:`Request` (blocks in the order the model sees
them, the reserved output, the overflow strategy) and a response, stream or error into an
:class:`Outcome`; everything else is here:

- The inference span comes from ``opentelemetry-util-genai``'s ``TelemetryHandler``. When the
  official GenAI instrumentor of the same client is also enabled, the handler merges the two
  nested inference invocations into ONE span whichever wrapper runs outermost: the outer one
  owns the span, the inner one is suppressed and publishes its ``gen_ai.*`` data into it.
  Our context telemetry always goes on ``invocation.span``, which is that one span. A call
  (or stream) without content capture records the same span and metrics through
  :class:`~._inference.LightInference` instead, at a fraction of the cost; composed, it
  takes util-genai's part in the merge itself (publishing for the other instrumentor inside
  ours, or :class:`~._inference.LightSuppressed` inside the other one's inference).
- Outside any envelope the inference span carries ``context.scope = turn``: it IS the
  (implicit) envelope, and the budget and assembly spans are its children. Inside an envelope
  (``with ctx.envelope(...)``) the stages join that envelope and the injection event goes on
  the inference span.
- Streams are wrapped with util-genai's stream wrappers (iteration, ``with``, ``close()``,
  ``send``/``throw`` and abandoned streams behave as the SDK's own); the call is finished when
  the stream ends, is closed, or its HTTP response is closed by an SDK helper (not the SDK's
  own close inside our read, as an error raised while reading unwinds: the read ends the
  call with that error). With a light invocation a chunk's read is ours in one frame
  (util-genai's ``_advance`` inlined).

Telemetry never breaks the host: every step is guarded, and the application's exceptions
pass through unchanged (the same object).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
import logging
import os
import re
import sys
import threading
import weakref
from collections.abc import (
    Callable,
    Iterable,
    Iterator,
    Mapping,
    MappingView,
    Sequence,
)
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field, replace
from itertools import accumulate, compress
from timeit import default_timer
from typing import Any

import wrapt
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context, attach, detach
from opentelemetry.util.genai.handler import CLIENT_INFERENCE_CONTEXT_KEY, TelemetryHandler
from opentelemetry.util.genai.stream import AsyncStreamWrapper, SyncStreamWrapper

from .. import _digest
from .. import _semconv as S
from .._api import AgentContext, Budget, Envelope, current_envelope
from .._attributes import digest_text
from .._digest import message_digests, remember
from .._digest import short_digest as _short_digest
from .._enums import CompactionMethod, ContextKind, InjectionPoint, OverflowStrategy, Scope
from .._env import OTEL_AGENT_CONTEXT_STAGE_SPANS, warn_once
from .._envelope import _parent_and_envelope
from .._failsafe import is_strict
from .._fastattrs import set_attributes
from .._folded import (
    _SEG_OUTPUT,
    _TEXT,
    CallRecord,
    Row,
    Segment,
    _block_row,
    block_columns,
    fold_call,
    fold_plain,
)
from .._masking import mask_messages
from .._records import ContextItem, ContextSourceRef
from .._version import __version__
from . import _frames, _inference, _tokens
from ._inference import (
    COMPOSABLE,
    LightInference,
    LightSuppressed,
    light_mode_of,
    light_supported,
)
from ._models import context_window
from ._tokens import estimate_tokens

__all__ = [
    "Accumulator",
    "Api",
    "Block",
    "Call",
    "ClientTelemetry",
    "LiveTelemetry",
    "OurAsyncStream",
    "OurSyncStream",
    "Outcome",
    "Request",
    "async_wrapper",
    "guarded",
    "distinct_ids",
    "helper_aexit",
    "helper_exit",
    "is_context_length_error",
    "known_message_id",
    "make_block",
    "make_item",
    "numbered",
    "on_close",
    "plain_block",
    "remembered",
    "overflow_tokens_from",
    "short_digest",
    "sync_wrapper",
    "tool_call_id",
    "tool_result_id",
    "Wrapped",
    "unwrap_all",
    "wrap_all",
]

_log = logging.getLogger("otel_agent_context")
try:  # util-genai's invocation inside another's inference (the path without the light one)
    from opentelemetry.util.genai._inference_invocation import SuppressedInferenceInvocation
    _SUPPRESSED: tuple[type, ...] = (LightSuppressed, SuppressedInferenceInvocation)
except ImportError:  # pragma: no cover - depends on the installed util-genai
    _SUPPRESSED = (LightSuppressed,)
#: what the GenAI conventions record as content: through the masker first
_MESSAGES = frozenset({"input_messages", "output_messages", "system_instruction"})

#: Segments of the window layout, in order.
SEG_SYSTEM = InjectionPoint.SYSTEM_PROMPT.value
SEG_DEVELOPER = InjectionPoint.DEVELOPER_PROMPT.value
SEG_TOOLS = "tool_definitions"
SEG_HISTORY = InjectionPoint.MESSAGE_HISTORY.value
SEG_OUTPUT = _SEG_OUTPUT
_SEGMENT_ORDER = (SEG_SYSTEM, SEG_DEVELOPER, SEG_TOOLS, SEG_HISTORY)
#: plain strings: an enum member's ``.value`` is a Python-level property read
_TRUNCATE_MIDDLE = OverflowStrategy.TRUNCATE_MIDDLE.value
_REJECT = OverflowStrategy.REJECT.value
_NOTHING_KEPT: frozenset[int] = frozenset()

# "maximum context length is 128000 tokens ... resulted in 130000 tokens" /
# "prompt is too long: 210000 tokens > 200000 maximum"
_NUMBERS = re.compile(r"(\d[\d,]*)\s*tokens")


def _strict_now() -> bool:
    return is_strict()


def guarded(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Log (or, in strict test mode, raise) the instrumentation's own errors; return None."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception:
            if _strict_now():
                raise
            _log_failed(fn)
            return None

    return wrapper


def _log_failed(fn: Callable[..., Any]) -> None:
    """:func:`guarded`'s log of an error of ours in ``fn`` (in its ``except`` block)."""
    _log.warning("otel_agent_context: %s failed; context telemetry for this call is "
                 "incomplete", fn.__qualname__, exc_info=True, stacklevel=2)


def make_item(item_id: str, kind: str, text: str | None, capture: bool, *,
              content_mode: str = "inline", tokens: int | None = None,
              tool_call_id: str | None = None, response_id: str | None = None,
              content_ref: str | None = None) -> ContextItem:
    """One message or input item as a context item: digest always, content only if captured."""
    return make_block(item_id, kind, text, capture, "", "", content_mode=content_mode,
                      tokens=tokens, tool_call_id=tool_call_id, response_id=response_id,
                      content_ref=content_ref).item


def short_digest(*parts: str) -> str:
    """12 hex characters naming a message by its content (stable across turns; keyed, so
    the id does not reveal a guessable text)."""
    return _short_digest(*parts)


_FACTS = "message facts"


def message_facts(role: str, text: str) -> tuple[str, int, str | None]:
    """A string message's item id (``role:<short digest>``: the first 12 hex characters of
    its digest), token estimate and digest, remembered with the digests, the text's
    characters counted here (a history is sent again with every call; its digests are not
    remembered on their own)."""
    key = (_FACTS, role, text, _tokens._estimator_key)
    facts = _memo_get(key)  # recall() without its call: once a new message
    if facts is None or not _digest._resolved:
        short, digest = message_digests(text)
        facts = (f"{role}:{short}", estimate_tokens(text), digest)
        remember(key, len(text), facts)
    return facts  # type: ignore[no-any-return]


def message_id(role: str, text: str) -> str:
    """The item id of a message of ``role`` and ``text`` without one of its own (a
    framework's, the API's): :func:`message_facts`', the same in every reader and record."""
    return message_facts(role, text)[0]


_PLAIN_BLOCK = "plain block"
_PLAIN_ROW = "plain row"
_memo_get = _digest._MEMO.get  # the memo is cleared, never replaced
#: what :func:`remember` kept under a key, without :func:`recall`'s check that the digest
#: key is still the one the value was made with (the caller checks ``_digest._resolved``)
remembered = _memo_get


def plain_block(role: str, text: str, kind: str, point: str, segment: str) -> Block:
    """The block of a message that is a role and a string, without content capture, for the
    general readers: remembered beside the digests under its role, text, kind and the token
    estimator (a history is sent again with every call; a remembered block is shared by the
    calls that send it, so it is never changed: :func:`distinct_ids` renames a copy). The
    same fields as ``make_block`` with :func:`message_facts`' id."""
    key = (_PLAIN_BLOCK, role, text, kind, _tokens._estimator_key)
    block = _memo_get(key)  # recall() without its call: once a message, every call
    if block is None or not _digest._resolved:
        item_id, tokens, digest = message_facts(role, text)
        block = Block(item_id, kind, point, segment, tokens, digest, None, "inline", None,
                      None, None, False, None, text or None)
        # its text counted again: an application that builds its messages anew each call
        # gives the block another string than the facts' (twice counted beats uncounted)
        remember(key, len(text), block)
    return block  # type: ignore[no-any-return]


def plain_row(role: str, text: str, kind: str, point: str, segment: str) -> Row:
    """The row (``_block_row``'s fields) of :func:`plain_block`'s block, for the one-pass
    readers (:func:`remembered_history`), which need no block: remembered as a tuple of
    strings and numbers, which the garbage collector stops tracking at its first
    collection. A remembered block stays tracked until the memo is forgotten: an agent's
    new messages, three blocks a call, drove full collections of the application's whole
    heap (benchmarks/instrumentation.md, run AL)."""
    key = (_PLAIN_ROW, role, text, kind, _tokens._estimator_key)
    row = _memo_get(key)
    if row is None or not _digest._resolved:
        row = _new_row(key, role, text, kind, point, segment)
    return row  # type: ignore[no-any-return]


def _new_row(key: Any, role: str, text: str, kind: str, point: str, segment: str) -> Row:
    """:func:`plain_row`'s row made and remembered under ``key``, which missed."""
    item_id, tokens, digest = message_facts(role, text)
    row = (item_id, kind, tokens, point, digest or "", segment, False, True)
    remember(key, len(text), row)  # counted again, as plain_block's
    return row


_CALL_ROW = "call row"


def call_row(item_id: str, kind: str, text: str, plain: bool = False) -> Row:
    """The row of a history message or input item with an id of its own, for the one-pass
    readers: one that names a tool call (a call or its result: ``make_block``'s block with
    ``tool_call_id``, inline; not plain, the call's id recorded beside it,
    ``Request.plain_history``), or a ``plain`` one (an item the API gave back, by its id).
    Remembered as :func:`plain_row`'s, under its item id, kind and text."""
    key = (_CALL_ROW, item_id, kind, text, plain, _tokens._estimator_key)
    row = _memo_get(key)
    if row is None or not _digest._resolved:
        digest = message_digests(text)[1]
        row = (item_id, kind, estimate_tokens(text), _P_HISTORY, digest or "", SEG_HISTORY,
               False, plain)
        remember(key, len(text) + len(item_id), row)
    return row  # type: ignore[no-any-return]


#: an SDK's classes by (module, name), once the SDK has loaded them
_SDK_CLASSES: dict[tuple[str, str], type] = {}


def sdk_class(module: str, name: str) -> Any:
    """The class ``name`` of the SDK's ``module`` if the application has loaded it (an
    object of it in a request was made by it), else None; never imports."""
    found = _SDK_CLASSES.get((module, name))
    if found is None:
        found = getattr(sys.modules.get(module), name, None)
        if not isinstance(found, type):
            return None
        _SDK_CLASSES[module, name] = found
    return found


def sdk_extra(obj: Any, name: str) -> Any:
    """``getattr(obj, name, None)`` for an SDK model object of an exact known class and a
    field it does not declare (set after the SDK built it: its models take any): read from
    the object's fields and extras, where a pydantic model keeps it, without the model's
    lookup of a missing name (an error raised and caught: ~4 µs, twice in an agent's call)."""
    try:
        found = obj.__dict__.get(name)
        if found is None:
            extra = obj.__pydantic_extra__
            if extra:
                found = extra.get(name)
        return found
    except AttributeError:  # not a pydantic 2 model (1.x keeps extras in __dict__)
        return getattr(obj, name, None)


def is_text(value: Any, text: str) -> bool:
    """Whether ``value`` is the string ``text``: a field of an SDK object, which an
    application may have set to anything after the SDK built it (its comparison too)."""
    return type(value) is str and value == text


def row_block(row: Row, text: str, call_id: str | None = None) -> Block:
    """The block of a one-pass reader's message from its row (:func:`plain_row`,
    :func:`call_row` with the ``call_id`` it names), made when something asks for the
    request's blocks (``Request.blocks``)."""
    block = Block(row[0], row[1], row[3], row[5], row[2], row[4] or None, None, "inline",
                  None, call_id, None, False, None, text or None)
    block._row = row
    return block


#: plain strings (the readers' too): an enum attribute lookup per block adds up
_K_USER_MESSAGE = ContextKind.USER_MESSAGE.value
_K_SESSION_HISTORY = ContextKind.SESSION_HISTORY.value


#: a one-pass reader's history: the rows and texts of its blocks (a message's, or each of
#: its content blocks'), and the tool call ids of those that name one by their position
#: (None: none does)
History = tuple[list[Row], list[str], dict[int, str] | None]
#: a reader's rows of a history message that is not a dict of a role and a string (tool
#: calls, tool results, an SDK's message object): (row, text, the call's id or None) for
#: each of its blocks, or None when it is not one it reads so; never for a message the
#: general reader takes for the latest user message (``remembered_history``'s scan passes
#: over a user message whose content is a list)
OtherRows = Callable[[Any], list[tuple[Row, str, str | None]] | None]


def remembered_history(messages: list[Any], specs: dict[str, tuple[str, str, str]] | None,
                       other: OtherRows | None = None) -> History | None:
    """The rows (:func:`plain_row`) and texts of a history of plain messages, each a dict of
    a role and a string, the latest user message its own kind: for a reader's one-pass path
    (``Api.plain``; ``Request.plain_history``: their blocks are made only if something asks
    for them). ``specs``: a message's (kind, injection point, segment) by its role (a role
    not in it: None), or None for every role a history message. ``other``: the reader's rows
    of any other message (an agent's tool calls and their results). A message an earlier
    call read is looked up; a new one (an agent's call adds a reply and a question to what
    the last one sent) is made as the general reader makes it. None when a message is
    neither (then the reader reads the request)."""
    last_user = -1
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if type(m) is not dict:
            if other is None:
                return None
            continue  # ``other`` reads no user message
        if m.get("role") == "user" and (other is None or type(m.get("content")) is not list):
            last_user = i
            break
    estimator = _tokens._estimator_key
    rows: list[Row] = []
    texts: list[str] = []
    calls: dict[int, str] | None = None
    append = rows.append
    append_text = texts.append
    i = -1  # a counter, not enumerate's tuple a message
    for m in messages:
        i += 1
        if type(m) is dict and len(m) == 2:
            try:  # subscripts, no call: a history is read again with every call
                role = m["role"]
                content = m["content"]
            except KeyError:
                role = content = None
            if type(content) is str and type(role) is str:
                if i == last_user:  # a user message (the scan's)
                    spec = _LATEST_USER_SPEC
                elif specs is None:
                    spec = _HISTORY_SPEC
                elif role in specs:
                    spec = specs[role]
                else:
                    return None
                key = (_PLAIN_ROW, role, content, spec[0], estimator)
                found = _memo_get(key)
                append(_new_row(key, role, content, *spec) if found is None else found)
                append_text(content)
                continue
        if other is None or i == last_user:
            return None
        read = other(m)
        if read is None:
            return None
        for row, text, call_id in read:
            if call_id is not None:
                if calls is None:
                    calls = {}
                calls[len(rows)] = call_id
            append(row)
            append_text(text)
    return rows, texts, calls


def plain_request(provider: str, model: str, reserved: int | None, stream: bool | None,
                  extras: tuple[int, dict[str, Any]] | None, messages: list[Any],
                  specs: dict[str, tuple[str, str, str]] | None,
                  blocks: list[Block] | None = None, other: OtherRows | None = None
                  ) -> Request | None:
    """A one-pass reader's request (``Api.plain``): ``extras`` its tool definitions' estimate
    and GenAI fields (None: not plain values), its history from ``messages``
    (:func:`remembered_history` with ``specs`` and ``other``), after ``blocks``, the system
    prompt's remembered ones; None when the request is not plain."""
    if extras is None:
        return None
    history = remembered_history(messages, specs, other)
    if history is None:
        return None
    req = Request(provider, model, reserved, stream is True, *extras)
    if blocks is not None:
        req.blocks = blocks
    req.plain_history = history
    return req


_P_HISTORY = InjectionPoint.MESSAGE_HISTORY.value
#: (kind, injection point, segment) of a history message, and of the latest user message
_HISTORY_SPEC = (_K_SESSION_HISTORY, _P_HISTORY, SEG_HISTORY)
_LATEST_USER_SPEC = (_K_USER_MESSAGE, _P_HISTORY, SEG_HISTORY)


#: Message ids a framework gave the messages of the model call under way, by (role, text),
#: in order, a tool's result by (``TOOL_RESULT``, its call id): a block takes its message's
#: id (the one the framework's truncation and compaction records use) instead of a content
#: digest or its call's. Set by the LangChain handler and LlamaIndex's turns. A value that
#: is not a plain dict may have a ``for_call(request)``: the ids for the call reading that
#: request (its keyword arguments) now (LangChain's runs started together).
KNOWN_MESSAGES: contextvars.ContextVar[dict[tuple[str, str], list[Any]] | None] = \
    contextvars.ContextVar("otel_agent_context.known_messages", default=None)


TOOL_RESULT = "tool_result"
#: the key a framework's messages' tool calls are given under, with each call's id, in
#: order: a message of calls alone (no text) by its id for its first call, which names the
#: call's block (an input item or a content block of its own: the message makes none),
#: every other call by "" (its block is ``<prefix>:<call id>``)
TOOL_CALL = "tool_call"
#: the key prefix (before the role) a message of several text parts is given under, with
#: its first part: ``(parts, id)``, for a reader that reads each part as a block of its own
TEXT_PARTS = "text_parts:"


def tool_result_id(call_id: Any) -> str:
    """The item id of a tool's result: the framework's own id of it if one was given, else
    ``tool_result:<call id>`` (two results of one output are two items)."""
    return known_message_id(TOOL_RESULT, str(call_id)) or f"tool_result:{call_id}"


def tool_call_id(prefix: str, call_id: Any) -> str:
    """The item id of a tool call read as a block of its own (``<prefix>:<call id>``), or
    the framework's id of its message when the call is the first of a message of calls
    alone (``TOOL_CALL``)."""
    return known_message_id(TOOL_CALL, str(call_id)) or f"{prefix}:{call_id}"


def known_message_id(role: str, text: str) -> str | None:
    """The framework's id of the next message with this role and text, if one was given."""
    known = KNOWN_MESSAGES.get()
    if not known:
        return None
    ids = known.get((role, text))
    return ids.pop(0) if ids else None


def numbered(ids: Iterable[str]) -> list[str]:
    """``ids`` with a repeat of one ``<id>#2``, ``#3``... by position, as
    :func:`distinct_ids` names repeated blocks (for a framework's records of the same
    messages)."""
    ids = list(ids)
    return ids if len(set(ids)) == len(ids) else _repeats_named(ids)


def _repeats_named(ids: Sequence[Any]) -> list[Any]:
    """``ids`` with each repeat named ``<id>#<n>``, ``n`` from 2 by position, skipping a
    name some id already has or an earlier repeat took (a framework's ids may end in
    ``#2`` themselves): no two names alike."""
    taken = set(ids)
    seen: dict[Any, int] = {}
    out = []
    for item_id in ids:
        n = seen.get(item_id, 0)
        if not n:
            seen[item_id] = 1
            out.append(item_id)
            continue
        name = f"{item_id}#{n + 1}"
        while name in taken:
            n += 1
            name = f"{item_id}#{n + 1}"
        seen[item_id] = n + 1
        taken.add(name)
        out.append(name)
    return out


def distinct_ids(blocks: list[Block], ids: Sequence[Any] | None = None) -> bool:
    """Two blocks never share an item id: a repeat of a message (the same text again, later
    in the history) is ``<id>#2``, ``#3``, ... by position, stable across calls
    (:func:`_repeats_named`). A renamed block is a copy in its place (a remembered one, see
    :func:`plain_block`, is shared). ``ids``: the blocks' item ids when the caller has them.
    Whether a block was renamed."""
    if ids is None:
        ids = [b.item_id for b in blocks]
    if len(set(ids)) == len(ids):
        return False  # no repeat (the usual history): nothing to rename
    for i, (block, name) in enumerate(zip(blocks, _repeats_named(ids), strict=True)):
        if name != block.item_id:
            blocks[i] = replace(block, item_id=name, _item=None)
    return True


@dataclass(slots=True)
class Block:
    """One block of the assembled input: the item's fields, where it is injected, its window
    segment. Plain fields, not a :class:`ContextItem`: building and validating a record per
    message was most of the cost of reading a request; :attr:`item` builds it when needed."""

    item_id: str
    kind: str
    point: str
    segment: str
    tokens: int = 0
    digest: str | None = None
    #: The text, only under content capture.
    content: str | None = None
    content_mode: str = "inline"
    content_ref: str | None = None
    tool_call_id: str | None = None
    response_id: str | None = None
    cache_breakpoint: bool = False
    _item: ContextItem | None = None
    #: The text, always: compared in process with the envelope's selected items (block
    #: source refs), never exported.
    text: str | None = None
    #: What the call's records read of it (``_folded.block_columns``), kept when first read
    #: (not an init field: a copy made by ``replace`` starts without it)
    _row: Row | None = field(default=None, init=False, compare=False, repr=False)

    @property
    def plain(self) -> bool:
        """Nothing of the item to record beyond the block event's own attributes (no
        content, no native id, inline)."""
        return (self.content_mode == "inline" and not self.tool_call_id
                and not self.response_id)

    @property
    def item(self) -> ContextItem:
        """The block's item as a context item (built once, on first use)."""
        item = self._item
        if item is None:
            mappings: dict[str, str] = {}
            if self.tool_call_id:
                mappings["model_api.tool_call_id"] = self.tool_call_id
            if self.response_id:
                mappings["model_api.response_id"] = self.response_id
            item = self._item = ContextItem(  # kind and mode are checked enum values
                item_id=self.item_id, context_kind=self.kind,  # type: ignore[arg-type]
                content_mode=self.content_mode,  # type: ignore[arg-type]
                content=self.content, content_ref=self.content_ref, token_estimate=self.tokens,
                digest=self.digest,
                source_refs=[ContextSourceRef(external_mappings=mappings)] if mappings else [])
        return item


def make_block(item_id: str, kind: str, text: str | None, capture: bool, point: str,
               segment: str, *, content_mode: str = "inline", tokens: int | None = None,
               tool_call_id: str | None = None, response_id: str | None = None,
               content_ref: str | None = None, cache_breakpoint: bool = False) -> Block:
    """One message or input item as a block: digest always, content only if captured."""
    return Block(item_id, kind, point, segment,
                 estimate_tokens(text) if tokens is None else tokens,
                 digest_text(text) if text else None,
                 text if capture and text else None,
                 content_mode, content_ref, tool_call_id or None, response_id or None,
                 cache_breakpoint, None, text or None)


#: held while a request's blocks are made from its history (``Request.blocks``): rare
_MAKING_BLOCKS = threading.Lock()


@dataclass(slots=True, init=False)
class Request:
    """A model call's input, provider-neutral."""

    provider: str
    model: str | None
    #: the blocks (``blocks``) made so far: all of them but ``_history``'s
    _blocks: list[Block]
    #: a one-pass reader's history as rows, texts and call ids (``remembered_history``), after
    #: ``_blocks``: made into blocks when something asks for ``blocks`` (a call's records
    #: read the rows; most calls never ask)
    _history: History | None
    reserved_output: int | None
    overflow_strategy: str
    tool_tokens: int
    compacted: bool
    stream: bool
    operation: str
    #: InferenceInvocation properties to set (temperature, top_p, max_tokens, ...).
    genai: dict[str, Any]
    #: Provider context-editing configuration (Anthropic ``context_management.edits``).
    edits: list[dict[str, Any]]
    #: Tool names by tool call id (which tool uses an edit may clear).
    tool_names: dict[str, str]
    #: A call whose whole purpose is to compact its input (OpenAI ``responses.compact``):
    #: the blocks at these positions come back as they are; the others are replaced.
    compaction_call: bool
    kept: frozenset[int]
    #: Provider attributes the API called gives (OpenAI Responses' ``openai.api.type``),
    #: written with the response's: on a call that ends without them too (refused, cut
    #: short), as the GenAI instrumentor writes them at the request.
    attributes: dict[str, Any] | None

    # written out, not the dataclass's: its keyword defaults and factories were ~half the
    # cost of a request's fixed reading; the other fields are set after, when they apply
    def __init__(self, provider: str, model: str | None, reserved_output: int | None = None,
                 stream: bool = False, tool_tokens: int = 0,
                 genai: dict[str, Any] | None = None,
                 overflow_strategy: str = _REJECT) -> None:
        self.provider = provider
        self.model = model
        self._blocks = []
        self._history = None
        self.reserved_output = reserved_output
        self.overflow_strategy = overflow_strategy
        self.tool_tokens = tool_tokens
        self.compacted = False
        self.stream = stream
        self.operation = "chat"
        self.genai = {} if genai is None else genai
        self.edits = []
        self.tool_names = {}
        self.compaction_call = False
        self.kept = _NOTHING_KEPT
        self.attributes = None

    @property
    def blocks(self) -> list[Block]:
        """The blocks in the order the model sees them."""
        if self._history is not None:
            with _MAKING_BLOCKS:  # another thread asking meanwhile waits for the whole list
                history = self._history
                if history is not None:
                    rows, texts, calls = history
                    made = (list(map(row_block, rows, texts)) if not calls else
                            list(map(row_block, rows, texts, map(calls.get, range(len(rows))))))
                    self._blocks = self._blocks + made
                    self._history = None  # after the list: None means it is whole
        return self._blocks

    @blocks.setter
    def blocks(self, blocks: list[Block]) -> None:
        self._blocks = blocks
        self._history = None

    @property
    def plain_history(self) -> History | None:
        """The history a one-pass reader read as rows, texts and the tool calls named, not
        made into blocks."""
        return self._history

    @plain_history.setter
    def plain_history(self, history: History) -> None:
        self.blocks  # noqa: B018 - a history set before is made into blocks first
        self._history = history

    @property
    def block_count(self) -> int:
        """``len(blocks)``, without making the plain history's blocks."""
        history = self._history
        return len(self._blocks) + (len(history[0]) if history is not None else 0)

    @property
    def estimated_input(self) -> int:
        return sum(b.tokens for b in self.blocks) + self.tool_tokens


@dataclass(slots=True, init=False)
class Outcome:
    """What the response (or the finished stream) said."""

    response_id: str | None = None
    response_model: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    #: All input tokens the model saw, cached ones included.
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    reasoning_tokens: int | None = None
    #: Provider compaction items produced by this response: (id, encrypted) pairs.
    compactions: list[str] = field(default_factory=list)
    #: Provider context-management edits applied to this request (Anthropic applied_edits).
    applied_edits: list[dict[str, Any]] = field(default_factory=list)
    output_messages: list[Any] | None = None
    #: Provider attributes of the response the GenAI instrumentor records too (e.g.
    #: ``openai.response.system_fingerprint``), so ours alone loses nothing.
    attributes: dict[str, Any] = field(default_factory=dict)

    # written out, not the dataclass's (the same parameters): its four factory calls and
    # keyword defaults were a third of reading a response
    def __init__(self, response_id: str | None = None, response_model: str | None = None,
                 finish_reasons: list[str] | None = None, input_tokens: int | None = None,
                 output_tokens: int | None = None, cache_read: int | None = None,
                 cache_write: int | None = None, reasoning_tokens: int | None = None,
                 compactions: list[str] | None = None,
                 applied_edits: list[dict[str, Any]] | None = None,
                 output_messages: list[Any] | None = None,
                 attributes: dict[str, Any] | None = None) -> None:
        self.response_id = response_id
        self.response_model = response_model
        self.finish_reasons = [] if finish_reasons is None else finish_reasons
        self.input_tokens = input_tokens
        self.output_tokens = output_tokens
        self.cache_read = cache_read
        self.cache_write = cache_write
        self.reasoning_tokens = reasoning_tokens
        self.compactions = [] if compactions is None else compactions
        self.applied_edits = [] if applied_edits is None else applied_edits
        self.output_messages = output_messages
        self.attributes = {} if attributes is None else attributes


#: An :class:`Outcome` of nothing but the response's fields and usage, as a tuple (a
#: call's end builds no object for it): response id, response model, finish reasons (or
#: None), input, output, cache read, cache write and reasoning tokens, provider
#: attributes (or None; each value a ``str``, ``int``, ``float`` or ``bool``: written with
#: the call's records, ``CallRecord.stop``).
PlainOutcome = tuple[Any, Any, Any, Any, Any, Any, Any, Any, Any]


class Accumulator:
    """Builds an :class:`Outcome` from stream chunks (one per provider API)."""

    def __init__(self, capture: bool) -> None:
        self.capture = capture
        self.outcome = Outcome()
        #: Set on the API's terminal event: the call is finished then, not at the stream's
        #: end, because an outer wrapper (the official instrumentor) may end the span there.
        self.terminal = False
        #: True while our stream wrapper reads the SDK stream: a close of its HTTP response
        #: then is the SDK's own (as the body ends, or as an error raised while reading, a
        #: transport or decode error, unwinds), and the read ends the call (its
        #: ``StopIteration``, or that error as the application gets it), not the close.
        self.reading = False

    def add(self, chunk: Any) -> None:
        raise NotImplementedError

    def result(self) -> Outcome:
        return self.outcome


#: Anthropic's error when the input fits the window but not with ``max_tokens``:
#: "input length and `max_tokens` exceed context limit: N + R > W, decrease ..."
_INPUT_AND_RESERVED = re.compile(
    r"exceed context limit:\s*(\d[\d,]*)\s*\+\s*(\d[\d,]*)\s*>\s*(\d[\d,]*)")


def stated_limit(message: str) -> int | None:
    """The window a provider's context-length error states ("maximum context length is W
    tokens", "N tokens > W maximum", "N + R > W"), or None."""
    m = re.search(r"maximum context length is (\d[\d,]*)", message) or re.search(
        r"\d[\d,]*\s*tokens\s*>\s*(\d[\d,]*)\s*maximum", message)
    if m:
        return int(m.group(1).replace(",", ""))
    m = _INPUT_AND_RESERVED.search(message)
    return int(m.group(3).replace(",", "")) if m else None


def overflow_tokens_from(message: str) -> int | None:
    """Tokens over the limit (input + reserved output - window), from a provider's
    context-length error message."""
    m = _INPUT_AND_RESERVED.search(message)
    if m:
        given, reserved, window = (int(g.replace(",", "")) for g in m.groups())
        return max(given + reserved - window, 0)
    numbers = [int(n.replace(",", "")) for n in _NUMBERS.findall(message)]
    if "prompt is too long" in message and len(numbers) >= 1:
        m = re.search(r"(\d[\d,]*)\s*tokens\s*>\s*(\d[\d,]*)", message)
        if m:
            return int(m.group(1).replace(",", "")) - int(m.group(2).replace(",", ""))
    if len(numbers) >= 2:
        # "maximum context length is W tokens. However, you requested N tokens (...)"
        return max(numbers[1] - numbers[0], 0)
    return None


class LiveTelemetry:
    """The telemetry an instrumentor records with now, None while it is off, shared by
    every wrapper it ever made: a client keeps the wrapper of its first
    ``with_raw_response`` / ``with_streaming_response`` call (the SDKs cache those, holding
    the method as it was), which then calls through unrecorded after ``uninstrument()``
    and records with the new telemetry after ``instrument()`` again."""

    __slots__ = ("current",)

    def __init__(self, current: ClientTelemetry | None = None) -> None:
        self.current = current


class ClientTelemetry:
    """Per-instrumentor configuration: our API, the GenAI handler, the capture switch."""

    def __init__(self, scope_name: str, **kwargs: Any) -> None:
        self.ctx = AgentContext(tracer_provider=kwargs.get("tracer_provider"),
                                meter_provider=kwargs.get("meter_provider"),
                                capture_content=kwargs.get("capture_content"))
        agent_context = kwargs.get("agent_context")
        if isinstance(agent_context, AgentContext):  # tests: deterministic ids
            self.ctx = agent_context
        self.handler = TelemetryHandler(
            tracer_provider=kwargs.get("tracer_provider"),
            meter_provider=kwargs.get("meter_provider"),
            logger_provider=kwargs.get("logger_provider"),
            instrumentation_scope_name=scope_name,
            instrumentation_scope_version=__version__,
        )
        self.capture: bool = self.ctx.capture_content
        #: contract v0.2's folded form (one span per call) unless the deployment asks for
        #: the stage spans and events of v0.1
        stage_spans = os.environ.get(OTEL_AGENT_CONTEXT_STAGE_SPANS, "")
        mode = stage_spans.strip().lower()
        self.fold: bool = mode not in ("true", "1", "yes")
        if self.fold and mode not in ("", "false", "0", "no"):
            warn_once(OTEL_AGENT_CONTEXT_STAGE_SPANS, stage_spans,
                      "is not true or false; model calls are recorded in the folded form")
        #: The GenAI handler's own switch: gen_ai.input/output.messages go on spans only then.
        self.genai_capture: bool = self.handler.should_capture_content()
        #: Whether a plain call may record its inference through :class:`LightInference`
        #: (the same span and metrics as util-genai's, for about half the cost): not under
        #: content capture (ours or util-genai's), nor with a completion hook.
        self.light: bool = not self.capture and not self.genai_capture and \
            light_supported(self.handler)
        #: what the wrappers made with this telemetry record with (an instrumentor shares
        #: one between its instrumentations: see :class:`LiveTelemetry`)
        self.live = LiveTelemetry(self)

    @guarded
    def start(self, api: Api, args: tuple[Any, ...], kwargs: dict[str, Any],
              server_address: str | None = None, server_port: int | None = None,
              light: bool = False, wrapped_inside: bool = False) -> Call:
        return Call(self, api, args, kwargs, server_address, server_port,
                    light and self.light, wrapped_inside)


def _parent_context() -> Context | None:
    """The context our inference invocation starts from.

    An outer inference under way whose span is not the current one, while the current span
    is our envelope's, is a framework instrumentor's model call seen from the client below
    it (the official LangChain GenAI instrumentor opens its chat invocation from a callback).
    In the envelope's trace (the envelope opened as a child of that instrumentor's run, see
    ``langchain/_official.py``), the call joins it, as util-genai merges the official OpenAI
    instrumentor's call into it: one span for the call, carrying our records. In another
    trace (an envelope that could not be placed there), the call gets its own inference span,
    a child of the envelope, so its records stay in the envelope's trace."""
    return _start_context()[0]


#: :func:`_start_context`'s envelope when it did not read it
UNREAD: Any = object()


def _start_context() -> tuple[Context | None, Context, Any, Any]:
    """:func:`_parent_context`, the current context, the value of util-genai's inference
    key in the parent (the outer inference's data, or None) and the current envelope
    (``UNREAD`` when there is no outer inference), the current context read once (each
    read is a few Python calls; a call's start made ten)."""
    current = otel_context.get_current()
    parent, env = _parent_and_envelope(current)
    ctx = parent if parent is not None else current
    data = ctx.get(CLIENT_INFERENCE_CONTEXT_KEY)
    if data is None:
        return parent, current, None, UNREAD  # no outer inference: the common case
    if env is None or trace.get_current_span(ctx) is not env.span:
        # the outer inference is current: one span for both
        return parent, current, data, env
    outer = trace.get_current_span().get_span_context()
    if parent is not None and outer.trace_id == env.span.get_span_context().trace_id:
        # the framework's inference in the envelope's trace: join it
        return None, current, current.get(CLIENT_INFERENCE_CONTEXT_KEY), env
    return otel_context.set_value(CLIENT_INFERENCE_CONTEXT_KEY, None, ctx), current, None, env


class Call:
    """One model call: the inference invocation and its context stages."""

    def __init__(self, tel: ClientTelemetry, api: Api, args: tuple[Any, ...],
                 kwargs: dict[str, Any], address: str | None, port: int | None,
                 light: bool = False, wrapped_inside: bool = False) -> None:
        self.tel = tel
        self.done = False
        self.env: Envelope | None = None
        self.budget: Budget | None = None
        #: the call's records without envelope objects (see CallRecord), in place of
        #: ``env`` and ``budget`` until something needs them (``_full``)
        self.record: CallRecord | None = None
        self.own_env = False
        self.target: Any = None
        model = kwargs.get("model")
        parent, current, data, env = _start_context()
        #: another instrumentor's inference of this call holds its span (the official one
        #: outside ours): it ends that span, maybe before our end (see anthropic's manager)
        self.inside_another = data is not None
        inv: Any = None
        mode = light_mode_of(data) if light else False
        if mode is True and wrapped_inside and not COMPOSABLE:
            mode = False  # the official one inside: util-genai's outer invocation merges it
        if mode is True:
            # another wrapper inside ours (the official instrumentor's) opens an inference
            # of its own: util-genai suppresses it into ours through the published data
            inv = LightInference(tel.handler, api.provider,
                                 request_model=model if isinstance(model, str) else None,
                                 server_address=address, server_port=port, context=parent,
                                 publish=wrapped_inside, current=current)
        elif mode is not False:  # an inference under way (the official one outside ours)
            inv = LightSuppressed(mode, api.provider,
                                  request_model=model if isinstance(model, str) else None,
                                  server_address=address, server_port=port,
                                  context=parent if parent is not None else current)
        if type(inv) is not LightSuppressed:
            env = UNREAD  # a new current context (ours): read it again at the stages
        if inv is None:
            inv = tel.handler.inference(api.provider,
                                        request_model=model if isinstance(model, str) else None,
                                        server_address=address, server_port=port,
                                        operation_name="chat", context=parent)
        self.invocation = inv
        self.req: Request | None = None
        known = KNOWN_MESSAGES.get()
        token = None
        if known is not None and type(known) is not dict:
            # a framework's ids of several runs' messages (a LangChain batch's): this
            # call's run's
            try:
                pick = getattr(known, "for_call", None)
                if pick is not None and (mine := pick(kwargs)) is not known:
                    token = KNOWN_MESSAGES.set(mine)
            except Exception:
                if _strict_now():
                    self.done = True
                    inv.fail(RuntimeError("otel_agent_context instrumentation error"))
                    raise
                _log.warning("otel_agent_context: could not tell which framework run a "
                             "call is", exc_info=True)
                token = KNOWN_MESSAGES.set({})  # no run's ids rather than another's
        try:
            self._read(tel, api, args, kwargs, inv, env, current)
        except BaseException as exc:
            # the invocation is open (its context attached, its data published): an
            # interrupt here (Ctrl-C in the application's message generator, SystemExit)
            # or our error in strict mode ends it, or every later call would join it
            if not self.done:
                self.done = True
                inv.fail(exc)
            raise
        finally:
            if token is not None:
                KNOWN_MESSAGES.reset(token)

    def _read(self, tel: ClientTelemetry, api: Api, args: tuple[Any, ...],
              kwargs: dict[str, Any], inv: Any, env: Any = UNREAD,
              current: Context | None = None) -> None:
        """Read the request and begin the call's stages (``env``: the current envelope,
        when the start read it and nothing was made current since)."""
        # A span that does not record (sampled out, no SDK) gets nothing from the request,
        # unless content capture sends the messages elsewhere (util-genai's log events).
        # Not reading it then saves most of what such a call cost (89 -> 36 us in process).
        if not (inv.span.is_recording() or tel.capture or tel.genai_capture):
            return
        if api.plain is not None:
            try:
                if self._read_plain(tel, api.plain, kwargs, inv, env):
                    return
            except Exception:
                if self._stages_failed(inv):
                    raise
                _log.warning("otel_agent_context: context stages failed", exc_info=True)
                return
        if not _materialize(kwargs, api.settles):
            return  # the application's iterable raised: the SDK will raise it, unchanged
        try:
            self.req = api.parse_request(args, kwargs, tel.capture)
        except Unsettled:
            return  # as above, met by the reader
        except Exception:
            # a reader that settles its messages stopped before the rest: settle them as
            # before, so the SDK (and an instrumentor inside ours) reads lists, and the
            # application's own error comes first
            if api.settles is not None and not _materialize(kwargs):
                return
            if _strict_now():
                self.done = True
                inv.fail(RuntimeError("otel_agent_context instrumentation error"))
                raise
            _log.warning("otel_agent_context: could not read the request", exc_info=True)
            return
        try:
            if env is not UNREAD and otel_context.get_current() is not current:
                env = UNREAD  # the application's code in the request changed the context
            self._begin(inv, self.req, env)
        except Exception:
            if self._stages_failed(inv):
                raise
            _log.warning("otel_agent_context: context stages failed", exc_info=True)

    def _stages_failed(self, inv: Any) -> bool:
        """Our stages failed: end what they started (not as failed: the error is ours, not
        the call's), in strict test mode too; True when strict mode wants the error raised
        (the invocation ended first)."""
        try:
            self._end_stages(None)
        except Exception:
            _log.warning("otel_agent_context: could not end the call's stages", exc_info=True)
        self.env = self.budget = self.record = None
        self.own_env = False
        if _strict_now():
            self.done = True
            inv.fail(RuntimeError("otel_agent_context instrumentation error"))
            return True
        return False

    def _read_plain(self, tel: ClientTelemetry, plain: Callable[[dict[str, Any]], Any],
                    kwargs: dict[str, Any], inv: Any, env: Any) -> bool:
        """Read and record a plain request in one pass (``Api.plain``): what ``_materialize``,
        the reader, ``_begin`` and ``CallRecord.begin`` record for it, without their
        separate walks over the blocks (each pass costs more in a call through the client,
        which runs ours cold, than in a loop: benchmarks/instrumentation.md, run AG). Plain:
        outside any envelope (the call's record its own) or in one (the application's, an
        agent framework's run: the call joins it, ``fold_plain``) that has no item of text
        to search the blocks for, on a recording span, without content capture,
        every block plain (an earlier call's remembered, with its row; a new message's made
        and read here), their ids distinct, the system prompt's blocks first and the
        history's after (the tool definitions a segment between them). False, having
        recorded nothing, for any other request: the general path reads it."""
        if tel.capture or not tel.fold or not _digest._resolved:
            return False
        if env is UNREAD:
            env = current_envelope()
        span = inv.span
        # in an envelope with items of text selected or surfaced, the blocks' sources are
        # searched (``_begin``): the general path
        if env is not None and env._links is not None or not span.is_recording():
            return False
        try:
            req = plain(kwargs)
        except Exception:  # ours, with nothing recorded yet: the general path reads it
            if _strict_now():
                raise
            _log.debug("otel_agent_context: the one-pass request reader failed",
                       exc_info=True)
            return False
        if req is None:
            return False
        rows = [b._row or _block_row(b) for b in req._blocks]  # a new block read here
        before = len(rows)
        history = req._history
        calls = None
        if history is not None:
            rows += history[0]
            calls = history[2]
        if not rows:
            return False
        columns = list(zip(*rows, strict=False))  # every row is a Row: 8 fields
        ids, segs = columns[0], columns[5]
        n = len(ids)
        first = segs.count(SEG_SYSTEM)
        if (len(set(ids)) != n
                # every block plain but the history's naming a tool call (each one of them)
                or not (all(columns[7]) or calls and columns[7].count(False) == len(calls))
                or not set(map(type, ids)) <= _TEXT
                or segs[first:].count(SEG_HISTORY) != n - first):  # then the first are system
            return False
        call_ids: tuple[str, ...] | None = None
        if calls:  # the blocks' tool call ids, "" for a block naming none (as ``_fill``)
            named = [""] * n
            for i, call_id in calls.items():
                named[before + i] = call_id
            call_ids = tuple(named)
        for name, value in req.genai.items():  # as _begin: no messages without capture
            if value is not None:
                setattr(inv, name, value)
        if req.stream:
            inv.request_stream = True
        self.req = req
        self.window = window = context_window(req.model)
        self.target = span
        if env is not None:  # the application's (or a framework's) envelope: the call joins it
            self.own_env = False
            self.env = env
            env._adopt_conversation(getattr(inv, "conversation_id", None))
            self.budget = fold_plain(env, span, max_tokens=window,
                                     reserved_tokens=req.reserved_output,
                                     overflow_strategy=req.overflow_strategy, columns=columns,
                                     first=first, tool_tokens=req.tool_tokens,
                                     tool_call_ids=call_ids)
            return True
        self.own_env = True
        record = self.record = CallRecord(tel.ctx, span)
        record.begin_plain(window, req.reserved_output, req.overflow_strategy, columns, first,
                           req.tool_tokens, call_ids)
        return True

    def _begin(self, inv: Any, req: Request, env: Any = UNREAD) -> None:
        tel = self.tel
        for name, value in req.genai.items():
            if value is not None:
                setattr(inv, name, mask_messages(value) if name in _MESSAGES else value)
        if req.stream:
            inv.request_stream = True
        span = inv.span
        self.window = context_window(req.model)
        if env is UNREAD:
            env = current_envelope()
        self.own_env = env is None
        self.target = span
        record = None
        if env is None:
            if not span.is_recording():
                # sampled out, read for content capture's events alone: nothing of ours
                # would record (the envelope would be the no-op)
                return
            if tel.fold:
                # the call's own envelope, never current: its records without its objects
                record = self.record = CallRecord(tel.ctx, span)
            else:
                env = tel.ctx.envelope(scope=Scope.TURN, model=req.model, span=span)
        columns = block_columns(req.blocks)  # read once: for the ids, segments and fold
        if distinct_ids(req.blocks, columns[0]):
            columns = block_columns(req.blocks)
        segments = _segments(req, columns)
        if record is not None:
            record.begin(self.window, req.reserved_output, req.overflow_strategy, segments,
                         req.blocks, tel.capture, columns)
            if req.compacted:
                self._full().mark_compacted(span)
                inv.conversation_compacted = True
            return
        assert env is not None  # not light: the application's envelope, or a new one
        self.env = env
        if not self.own_env:
            env._adopt_conversation(getattr(inv, "conversation_id", None))
        # the items selected or surfaced in the envelope that each block's text carries
        # (None: nothing to compare, the usual case)
        found = env._block_sources([(b.item_id, b.digest, b.text) for b in req.blocks]
                                   ) if env._links is not None else None
        if tel.fold:  # contract v0.2: the call's records are attributes of its one span
            self.budget = fold_call(env, span, max_tokens=self.window,
                                    reserved_tokens=req.reserved_output,
                                    overflow_strategy=req.overflow_strategy,
                                    segments=segments, blocks=req.blocks, sources=found,
                                    capture=tel.capture, columns=columns)
        else:
            self._stage_spans(env, span, req, segments, found)
        if req.compacted:
            env.mark_compacted(span)
            inv.conversation_compacted = True

    def _full(self) -> Envelope:
        """The call's envelope and budget as objects, from its record (a call recording
        more than its usage: compaction, truncation, overflow)."""
        record = self.record
        if record is not None:
            self.record = None
            self.env, self.budget = record.full()
        assert self.env is not None
        return self.env

    def _stage_spans(self, env: Envelope, span: Any, req: Request,
                     segments: list[Segment], found: list[tuple[str, ...]] | None) -> None:
        """The span-and-event form (``OTEL_AGENT_CONTEXT_STAGE_SPANS=true``): a budget
        span with a segment event each, an assembly span with a block event each."""
        tel = self.tel
        budget = env.budget(max_tokens=self.window, reserved_tokens=req.reserved_output,
                            overflow_strategy=req.overflow_strategy)
        self.budget = budget
        for name, order, reserved, used in segments:
            budget.segment(name, order=order, reserved_tokens=reserved, used_tokens=used)
        asm = env.assembly(budget_id=getattr(budget, "budget_id", None))
        # the item's own attributes only where they add something to the block's (content
        # under capture, a native id, a non-inline content mode): fewer event attributes is
        # most of the per-call cost; runs of plain blocks go in one call
        capture = tel.capture
        rows: list[tuple[str, str, int, str, str | None]] = []
        for i, b in enumerate(req.blocks):
            sources = found[i] if found else ()
            if capture or not b.plain or sources:
                if rows:
                    asm.blocks(rows)
                    rows = []
                if capture or not b.plain:
                    asm.block(b.item, injection_point=b.point, describe=True,
                              source_item_refs=sources)
                else:
                    asm.block(b.item_id, kind=b.kind, tokens=b.tokens, injection_point=b.point,
                              digest=b.digest, source_item_refs=sources)
            else:
                rows.append((b.item_id, b.kind, b.tokens, b.point, b.digest))
        if rows:
            asm.blocks(rows)
        asm.stop()
        asm.inject(span=span, injection_point=InjectionPoint.MESSAGE_HISTORY)

    # -- the end of the call --------------------------------------------------------------

    def finish(self, out: Outcome | None) -> None:
        """The call succeeded (``out`` None: nothing could be read from the response)."""
        if self.done:
            return
        self.done = True
        inv = self.invocation
        try:
            if self.req is not None and self.req.attributes:
                self._put_api_attributes(out)
            # guarded as the two methods are, without their wrappers' calls
            if out is not None:
                try:
                    _RECORD_OUTCOME(self, inv, out)
                except Exception:
                    if _strict_now():
                        raise
                    _log_failed(_RECORD_OUTCOME)
            try:
                _END_STAGES(self, None)
            except Exception:
                if _strict_now():
                    raise
                _log_failed(_END_STAGES)
        finally:
            inv.stop()

    def finish_plain(self, fields: PlainOutcome) -> bool:
        """:meth:`finish` of a call whose records (a :class:`CallRecord`, or a budget in an
        envelope the call joined) take nothing from the response but its input tokens
        (``Api.plain_response``), in one pass: what ``_put_api_attributes``,
        ``_record_outcome`` and ``_end_stages`` do for it, without the :class:`Outcome` and
        their checks for what such a response cannot hold (the call's end runs cold, as its
        start: benchmarks/instrumentation.md, run AH). False, having done nothing, for any
        other call (its input count odd, its truncation the provider's, its envelope its
        own): :meth:`finish`."""
        tokens = fields[3]
        record, req, budget = self.record, self.req, self.budget
        if (self.done or req is None or req.overflow_strategy == _TRUNCATE_MIDDLE
                or not (tokens is None or (type(tokens) is int and tokens >= 0))
                or record is None and (budget is None or self.own_env)):
            return False
        self.done = True
        inv = self.invocation
        try:
            try:  # as finish() guards _record_outcome
                if record is not None:  # the attributes go with the stop's
                    _put_response(inv, self.target, *fields[:8], None)
                    if tokens is not None:  # what Budget.actual records
                        record.actual[S.BUDGET_ACTUAL_TOKENS] = tokens
                        record.actual[S.BUDGET_ACTUAL_ITEMS] = req.block_count
                else:  # the API's attributes first (``_put_api_attributes``)
                    assert budget is not None  # the check above
                    span, response = self.target, fields[8]
                    if req.attributes and not response and span.is_recording():
                        set_attributes(span, req.attributes)
                    _put_response(inv, span, *fields[:8], response)
                    if tokens is not None:
                        budget.actual(tokens=tokens, items=req.block_count)
            except Exception:
                if _strict_now():
                    raise
                _log_failed(_RECORD_OUTCOME)
            self.record = None
            try:  # as finish() guards _end_stages
                if record is not None:
                    record.stop(None, fields[8])
                elif budget is not None:  # the check above
                    budget.stop()
            except Exception:
                if _strict_now():
                    raise
                _log_failed(_END_STAGES)
        finally:
            inv.stop()
        return True

    def fail(self, exc: BaseException, out: Outcome | None = None) -> None:
        """The call raised ``exc`` (the application gets it unchanged); ``out``: what was
        read before it (a stream cut short)."""
        if self.done:
            return
        self.done = True
        try:
            if self.req is not None and self.req.attributes:
                self._put_api_attributes(out)
            if out is not None:
                self._record_outcome(self.invocation, out)
            self._end_stages(exc)
        finally:
            self.invocation.fail(exc)

    @guarded
    def _put_api_attributes(self, out: Outcome | None) -> None:
        """The request's provider attributes (``Request.attributes``) on the call's span
        when the response (``out``) gives none."""
        if out is not None and out.attributes:
            return
        span = self.target if self.target is not None else self.invocation.span
        if span.is_recording():
            set_attributes(span, self.req.attributes)  # type: ignore[union-attr,arg-type]

    @guarded
    def _record_outcome(self, inv: Any, out: Outcome) -> None:
        span = self.target if self.target is not None else inv.span
        _put_response(inv, span, out.response_id, out.response_model, out.finish_reasons,
                      out.input_tokens, out.output_tokens, out.cache_read, out.cache_write,
                      out.reasoning_tokens, out.attributes,
                      out.output_messages if self.tel.genai_capture else None)
        req = self.req
        if self.record is not None and req is not None:
            if not (out.compactions or out.applied_edits
                    or req.overflow_strategy == _TRUNCATE_MIDDLE):
                tokens = out.input_tokens
                if tokens is None:
                    return
                if type(tokens) is int and tokens >= 0:  # what Budget.actual accepts
                    self.record.actual[S.BUDGET_ACTUAL_TOKENS] = tokens
                    self.record.actual[S.BUDGET_ACTUAL_ITEMS] = req.block_count
                    return
            # an odd count from the server goes through Budget.actual's check (logged,
            # raised when strict) as it would without the record
            self._full()
        budget, env = self.budget, self.env
        if out.compactions and not (req is not None and req.compaction_call):
            # the provider compacted the conversation in this very call
            inv.conversation_compacted = True
            if env is not None:
                env.mark_compacted(span)
        if budget is None or env is None or req is None:
            return
        if out.input_tokens is not None:
            budget.actual(tokens=out.input_tokens, items=req.block_count)
        if (req.overflow_strategy == _TRUNCATE_MIDDLE and self.window
                and out.input_tokens is not None
                and (estimated := req.estimated_input) + (req.reserved_output or 0)
                > self.window and out.input_tokens < estimated):
            budget.truncated(segment=SEG_HISTORY, strategy=OverflowStrategy.TRUNCATE_MIDDLE,
                             tokens_before=estimated, tokens_after=out.input_tokens)
            # the input before the cut did not fit: an overflow, as for any trimmer
            budget.overflowed(overflow_tokens=estimated + (req.reserved_output or 0)
                              - self.window, strategy=OverflowStrategy.TRUNCATE_MIDDLE)
        if out.compactions:
            self._provider_compaction(out)
        if out.applied_edits:
            self._context_edits(out)

    def _provider_compaction(self, out: Outcome) -> None:
        """OpenAI server-side compaction: the input so far replaced by an encrypted item."""
        req, env = self.req, self.env
        assert env is not None and req is not None  # only called once the stages have begun
        explicit = req.compaction_call  # responses.compact: asked for, not a threshold
        with env.compaction(method=CompactionMethod.PROVIDER_CONTEXT_EDITING,
                            trigger="responses.compact" if explicit else "compact_threshold",
                            scope="input", replacement_policy="replace_sources") as cmp:
            kept = 0
            for i, b in enumerate(req.blocks):
                if i in req.kept:
                    kept += b.tokens
                elif b.point == InjectionPoint.MESSAGE_HISTORY.value:
                    cmp.source(b.item_id, covered=True, token_estimate=b.tokens,
                               kind=b.kind)
            for cid in out.compactions:
                cmp.summary(summary_id=f"compaction:{cid}", refresh_policy="provider",
                            token_estimate=out.output_tokens if explicit else None)
            cmp.loss_note("provider summary is encrypted: coverage is the provider's claim, "
                          "not verified")
            # after an explicit compaction the next input is the kept messages and the summary
            after = (kept + out.output_tokens if explicit and out.output_tokens is not None
                     else out.input_tokens)
            cmp.set(tokens_before=req.estimated_input, tokens_after=after)

    def _context_edits(self, out: Outcome) -> None:
        """Anthropic context editing: tool results (or thinking) cleared before the call."""
        req, env = self.req, self.env
        assert env is not None and req is not None  # only called once the stages have begun
        tool_results = [b for b in req.blocks if b.kind == "tool_result"]
        for edit in out.applied_edits:
            etype = str(edit.get("type") or "unknown")
            config = next((e for e in req.edits if e.get("type") == etype), {})
            excluded = set(config.get("exclude_tools") or ())
            cleared_n = int(edit.get("cleared_tool_uses") or 0)
            cleared_tokens = edit.get("cleared_input_tokens")
            with env.compaction(method=CompactionMethod.PROVIDER_CONTEXT_EDITING,
                                trigger=etype, scope="input",
                                replacement_policy="clear") as cmp:
                candidates = [b for b in tool_results
                              if req.tool_names.get(b.tool_call_id or "") not in excluded]
                for b in candidates[:cleared_n]:  # the oldest tool results are cleared first
                    cmp.source(b.item_id, covered=False, token_estimate=b.tokens,
                               kind=b.kind)
                what = (f"{cleared_n} tool uses" if "cleared_tool_uses" in edit else
                        f"{edit.get('cleared_thinking_turns', 0)} thinking turns")
                cmp.loss_note(f"{etype} cleared {what} ({cleared_tokens} input tokens)")
                before = req.estimated_input
                after = before - int(cleared_tokens or 0)
                cmp.set(tokens_before=before, tokens_after=max(after, 0),
                        source_count=cleared_n if "cleared_tool_uses" in edit else None)

    @guarded
    def _end_stages(self, exc: BaseException | None) -> None:
        record = self.record
        if record is not None:
            if exc is None or not is_context_length_error(exc):
                self.record = None
                record.stop(exc)
                return
            self._full()
        budget, env = self.budget, self.env
        if budget is not None and exc is not None and is_context_length_error(exc):
            # the provider's stated limit wins over our table's (the API knows its model)
            budget.overflowed(overflow_tokens=overflow_tokens_from(str(exc)),
                              strategy=OverflowStrategy.REJECT,
                              max_tokens=stated_limit(str(exc)))
        if budget is not None:
            budget.stop()
        if env is not None and self.own_env:
            if exc is None:
                env.stop()
            else:
                env.fail(exc)


#: the guarded methods a finishing call runs, unwrapped (``Call.finish`` guards them)
_RECORD_OUTCOME = inspect.unwrap(Call._record_outcome)
_END_STAGES = inspect.unwrap(Call._end_stages)


def _put_response(inv: Any, span: Any, response_id: Any, response_model: Any,
                  finish_reasons: Any, input_tokens: Any, output_tokens: Any,
                  cache_read: Any, cache_write: Any, reasoning_tokens: Any,
                  attributes: dict[str, Any] | None,
                  output_messages: list[Any] | None = None) -> None:
    """The response's fields on the invocation (util-genai's names) and its provider
    attributes on ``span``: an :class:`Outcome`'s, or a :data:`PlainOutcome`'s in order."""
    if response_id:
        inv.response_id = response_id
    if response_model:
        inv.response_model_name = response_model
    if finish_reasons:
        inv.finish_reasons = finish_reasons
    if input_tokens is not None:
        inv.input_tokens = input_tokens
    if output_tokens is not None:
        inv.output_tokens = output_tokens
    if cache_read:
        inv.cache_read_input_tokens = cache_read
    if cache_write:
        inv.cache_write_input_tokens = cache_write
    if reasoning_tokens:
        inv.thinking_tokens = reasoning_tokens
    if output_messages is not None:
        inv.output_messages = mask_messages(output_messages)
    if attributes and span.is_recording():
        # the API's values (the response's): checked in bulk, the SDK's way when any is
        # not a plain scalar or a limit applies (``_fastattrs``)
        set_attributes(span, attributes)


def _segments(req: Request, columns: list[tuple[Any, ...]] | None = None) -> list[Segment]:
    """The window's layout: the used segments in order, the output reserve, then the
    prefixes up to each cache breakpoint (unordered: they overlap the others).
    ``columns``: ``block_columns(req.blocks)`` when the caller has them."""
    if columns is None:
        columns = block_columns(req.blocks)
    tokens, segs, breakpoints = columns[2], columns[5], columns[6]
    used: dict[str, int] = {}
    n_blocks = len(segs)
    first = segs[0] if n_blocks else None
    k = segs.count(first) if n_blocks else 0
    if k == n_blocks:  # one segment (or none): the sums below, in C
        if n_blocks:
            used[first] = sum(tokens)  # type: ignore[index]
    elif segs[-1] != first and segs[k:].count(segs[-1]) == n_blocks - k:
        # a run of one segment, then a run of another (the usual layout: the system prompt,
        # then the history): the first k blocks are the first segment's
        used[first] = sum(tokens[:k])  # type: ignore[index]
        used[segs[-1]] = sum(tokens[k:])
    else:
        for seg, n in zip(segs, tokens, strict=True):
            used[seg] = used.get(seg, 0) + n
    # the tokens up to each cache breakpoint: running totals, in C
    prefixes = list(compress(accumulate(tokens), breakpoints)) if any(breakpoints) else []
    if req.tool_tokens:
        used[SEG_TOOLS] = req.tool_tokens
    out: list[Segment] = []
    for seg in _SEGMENT_ORDER:
        if seg in used:
            out.append((seg, len(out), None, used[seg]))
    if req.reserved_output is not None:
        out.append((SEG_OUTPUT, len(out), req.reserved_output, None))
    for n, prefix in enumerate(prefixes, 1):
        out.append((f"cache_prefix_{n}", None, None, prefix))
    return out


def is_context_length_error(exc: BaseException) -> bool:
    """Whether a provider error says the input did not fit the model's window."""
    code = getattr(exc, "code", None)
    if code == "context_length_exceeded":
        return True
    if getattr(exc, "status_code", None) != 400:
        return False
    try:
        text = str(exc)
    except Exception:  # an exception without text says nothing of the window
        return False
    return ("prompt is too long" in text or "maximum context length" in text
            or "context_length_exceeded" in text or "exceed context limit" in text)


# ---------------------------------------------------------------------------------------
# wrappers: one body for sync and async


def _http_response(stream: Any) -> Any:
    try:
        return getattr(stream, "response", None)
    except Exception:
        return None


def _read_chunk(stream: Any, acc: Accumulator, chunk: Any) -> None:
    """One chunk into the call's accumulator; the call finished at the API's terminal
    event (the stream wrapper's ``_process_chunk``)."""
    try:
        acc.add(chunk)
    except Exception:
        if _strict_now():
            raise
        _log.debug("otel_agent_context: could not read a stream chunk", exc_info=True)
    if acc.terminal:
        stream._finalize_success()


class _StreamMixin:
    _self_call: Call
    _self_acc: Accumulator

    def _process_chunk(self, chunk: Any) -> None:
        _read_chunk(self, self._self_acc, chunk)

    # Guarded: these run inside the application's iteration; a failure here must not
    # replace its StopIteration or its own error.
    @guarded
    def _on_stream_end(self) -> None:
        self._self_call.finish(self._self_acc.result())

    @guarded
    def _on_stream_error(self, error: BaseException) -> None:
        # a stream cut short (or abandoned): record what was read, then the error
        self._self_call.fail(error, self._self_acc.result())


#: the SDK stream util-genai's wrappers keep (sync, async): the one read inlined reads it
_ITERATOR = ("_self_iterator", "_self_aiter")


def _light_stream(wrapper: Any, inv: Any, acc: Accumulator, iterator: str) -> None:
    """What the wrapper's reads use with a light invocation (``_self_light``: the
    invocation, the accumulator, whether it is our own inference, whose span is current
    around each read and which times every chunk; else None: util-genai's ``_advance``).
    One tuple: an attribute read on the wrapper (a wrapt proxy with a Python
    ``__getattr__``) costs several plain ones, and a stream reads them on every chunk.
    Only when the wrapper holds the ``iterator`` the inlined read takes (a util-genai
    that keeps it under another name is read through its own ``_advance``)."""
    light = None
    if isinstance(inv, (_inference.LightInference, _inference.LightSuppressed)):
        try:
            _own(wrapper, iterator)
            light = (inv, acc, isinstance(inv, _inference.LightInference))
        except AttributeError:
            pass
    wrapper._self_light = light


#: an attribute of the stream wrapper itself, without the proxy's Python ``__getattr__``
#: hook in between (what a chunk's read costs)
_own = object.__getattribute__


def _activate(light: tuple[Any, Accumulator, bool]) -> Any:
    """util-genai's ``_execution_context`` for a light invocation: our own inference's
    span current again around a read (a token to detach), while the call is under way."""
    inv, _, own = light
    if own and not inv._finished and inv._token is None:
        return attach(inv._span_context)
    return None


def _light_chunk(stream: Any, light: tuple[Any, Accumulator, bool], chunk: Any) -> None:
    """A chunk just read: into the accumulator (``_process_chunk``), and its time
    (``_on_stream_chunk``; a suppressed invocation keeps the first chunk's only)."""
    inv, acc, own = light
    timed = own or inv.ttfc_seconds is None
    chunk_at = default_timer() if timed else 0.0
    _read_chunk(stream, acc, chunk)
    if timed:
        inv._on_stream_chunk(chunk_at)


class OurSyncStream(_StreamMixin, SyncStreamWrapper[Any]):
    """A sync SDK stream that records the call when it ends (or its response is closed)."""

    def __init__(self, stream: Any, call: Call, acc: Accumulator) -> None:
        super().__init__(stream, invocation=call.invocation)
        self._self_call = call
        self._self_acc = acc
        _light_stream(self, call.invocation, acc, _ITERATOR[0])
        call.invocation.suspend()
        response = _http_response(stream)
        close = getattr(response, "close", None)
        if close is not None:
            # SDK helpers (ResponseStream, ChatCompletionStream) close the HTTP response
            # directly: finish the call then, before any outer wrapper ends the span
            # (not the SDK's own close inside our read: see ``Accumulator.reading``).
            @functools.wraps(close)
            def closing(*args: Any, **kwargs: Any) -> Any:
                try:
                    return close(*args, **kwargs)
                finally:
                    if not self._self_finalized and not acc.reading:
                        error = _HELPER_EXIT_ERROR.get()
                        with self._execution_context():
                            if error is None:
                                self._finalize_success()
                            else:
                                self._finalize_failure(error)

            with contextlib.suppress(Exception):  # a response we cannot patch
                response.close = closing

    def __next__(self) -> Any:
        """util-genai's ``__next__`` (``_advance``: the call's span current around the
        read, the chunk read, then ``_process_chunk`` and its time recorded), for a light
        invocation in one frame: no closure, no generator context manager, two reads of the
        wrapper's attributes a chunk."""
        light = _own(self, "_self_light")
        if light is None:
            return SyncStreamWrapper.__next__(self)
        token = _activate(light)
        acc = light[1]
        acc.reading = True
        try:
            try:
                chunk = next(_own(self, _ITERATOR[0]))
            except StopIteration:
                self._finalize_success()
                raise
            except BaseException as error:
                self._finalize_failure(error)
                raise
            finally:
                acc.reading = False
            _light_chunk(self, light, chunk)
            return chunk
        finally:
            if token is not None:
                detach(token)

    def _advance(self, read: Callable[[], Any]) -> Any:
        """util-genai's read (the path without a light invocation), as ours."""
        acc = self._self_acc
        acc.reading = True
        try:
            return SyncStreamWrapper._advance(self, read)
        finally:
            acc.reading = False


class OurAsyncStream(_StreamMixin, AsyncStreamWrapper[Any]):
    """The async counterpart of :class:`OurSyncStream`."""

    def __init__(self, stream: Any, call: Call, acc: Accumulator) -> None:
        super().__init__(stream, invocation=call.invocation)
        self._self_call = call
        self._self_acc = acc
        _light_stream(self, call.invocation, acc, _ITERATOR[1])
        call.invocation.suspend()
        response = _http_response(stream)
        aclose = getattr(response, "aclose", None)
        if aclose is not None:
            @functools.wraps(aclose)
            async def closing(*args: Any, **kwargs: Any) -> Any:
                try:
                    return await aclose(*args, **kwargs)
                finally:
                    if not self._self_finalized and not acc.reading:
                        error = _HELPER_EXIT_ERROR.get()
                        with self._execution_context():
                            if error is None:
                                self._finalize_success()
                            else:
                                self._finalize_failure(error)

            with contextlib.suppress(Exception):
                response.aclose = closing

    async def __anext__(self) -> Any:
        """util-genai's ``__anext__`` for a light invocation in one frame (see
        :meth:`OurSyncStream.__next__`)."""
        light = _own(self, "_self_light")
        if light is None:
            return await AsyncStreamWrapper.__anext__(self)
        token = _activate(light)
        acc = light[1]
        acc.reading = True
        try:
            try:
                chunk = await anext(_own(self, _ITERATOR[1]))
            except StopAsyncIteration:
                self._finalize_success()
                raise
            except BaseException as error:
                self._finalize_failure(error)
                raise
            finally:
                acc.reading = False
            _light_chunk(self, light, chunk)
            return chunk
        finally:
            if token is not None:
                detach(token)

    async def _advance(self, read: Callable[[], Any]) -> Any:
        """util-genai's read (the path without a light invocation), as ours."""
        acc = self._self_acc
        acc.reading = True
        try:
            return await AsyncStreamWrapper._advance(self, read)
        finally:
            acc.reading = False


@dataclass(slots=True)
class Api:
    """How to read one provider API: request -> Request, response -> Outcome, chunks."""

    parse_request: Callable[[tuple[Any, ...], dict[str, Any], bool], Request]
    parse_response: Callable[[Any, bool], Outcome]
    accumulator: Callable[[bool], Accumulator]
    is_stream_call: Callable[[dict[str, Any]], bool]
    provider: str
    #: the request key whose list ``parse_request`` settles itself, message by message, as
    #: it reads it (see ``settle_message``): not walked twice
    settles: str | None = None
    #: ``parse_request(args, kwargs, False)`` of a plain request (its prompt's blocks read
    #: by an earlier call, its messages plain), or None for any other (``Call._read_plain``)
    plain: Callable[[dict[str, Any]], Request | None] | None = None
    #: ``parse_response(result, False)``'s fields as :data:`PlainOutcome` for the SDK's own
    #: response with nothing to record but its usage, or None for any other
    #: (``Call.finish_plain``)
    plain_response: Callable[[Any], PlainOutcome | None] | None = None


def _server(instance: Any) -> tuple[str | None, int | None]:
    """The host and port of the client's base URL (the last URL's remembered: an httpx
    URL's host and port are properties, read again for every call otherwise)."""
    global _last_server
    try:
        url = instance._client.base_url
        last = _last_server
        if last[0] is url:  # held by the tuple: never another URL at the same address
            return last[1]
        server = url.host or None, url.port
        _last_server = (url, server)
        return server
    except Exception:
        return None, None


_last_server: tuple[Any, tuple[str | None, int | None]] = (None, (None, None))


def _materialize(kwargs: dict[str, Any], own: str | None = None) -> bool:
    """Turn one-shot iterators in the request into lists, in place, before we read it;
    False if one of them raised (then the request must not be read).

    The SDKs type ``messages``, ``system``, ``tools``, ``input``, message ``content``,
    ``tool_calls``, tool-result ``content`` and more as ``Iterable``, so a generator is
    valid anywhere in there: reading it first would send the provider an empty request. The
    lists are written into the request the SDK receives, so both see the same data, in copies
    of the lists and dicts on the way to them (the application's own stay as they were). An
    iterator that raises is handed on as one that yields what it yielded and then raises the
    same exception, so the SDK meets the application's error where it would have.
    ``own``: a key whose list the reader settles as it reads it (``settle_message``)."""
    failed: list[BaseException] = []
    for key, value in kwargs.items():
        if type(value) in _PLAIN_TYPES:
            continue  # the model, the sizes: no call for them
        if key == own and type(value) is list:
            continue
        if _maybe_one_shot(value):
            return False
        settled = _settle(value, 0, failed)
        if settled is not value:
            kwargs[key] = settled
    if failed and own is not None and type(listed := kwargs.get(own)) is list:
        kwargs[own] = _settle(listed, 0, failed)  # the reader will not run: settled here
    return not failed


def _maybe_one_shot(value: Any) -> bool:
    """Whether ``value`` is an iterable the request's readers would iterate but that may
    yield only once (a cursor, a queue's view: ``__iter__`` without being an iterator), nor
    a container we know: reading it first could send the provider nothing, and the SDK may
    refuse it anyway (then the application must meet that error unchanged). Such a request
    is not read; the call is recorded without its context."""
    if isinstance(value, (Sequence, Mapping, AbstractSet, MappingView, Iterator, bytes)) or \
            not isinstance(value, Iterable):
        return False  # read again as often as asked (a deque, a dict's values, a range)
    return getattr(type(value), "model_fields", None) is None  # not an SDK's (pydantic) model


#: How deep a request is searched for iterators (messages > message > content > block >
#: tool-result content > block), and the keys never searched (JSON schemas are plain data).
_SETTLE_DEPTH = 6
_PLAIN_KEYS = frozenset({"parameters", "input_schema", "schema", "json_schema", "metadata"})
_LEAVES = (str, bytes, int, float, bool)
_PLAIN_TYPES = frozenset({str, bytes, int, float, bool, type(None)})


def _settle(value: Any, depth: int, failed: list[BaseException]) -> Any:
    """``value`` with its iterators read into lists (see :func:`_materialize`): the same
    object when none is in it, else a copy of each container on the way to one, the
    application's own lists and dicts left as they were (the SDK never changes them)."""
    kind = type(value)
    if kind in _PLAIN_TYPES or depth > _SETTLE_DEPTH:
        return value  # the usual request: plain dicts, lists and strings, no ABC check
    if kind is dict:
        copied = None
        for key, item in value.items():
            if key in _PLAIN_KEYS or type(item) in _PLAIN_TYPES:
                continue
            settled = _settle(item, depth + 1, failed)
            if settled is not item:
                if copied is None:
                    copied = dict(value)
                copied[key] = settled
        return value if copied is None else copied
    if kind is list:
        if depth < _SETTLE_DEPTH and _plain_messages(value):
            return value  # a history of plain messages (the usual request): nothing to settle
        listed = None
        for i, item in enumerate(value):
            item_kind = type(item)
            if item_kind in _PLAIN_TYPES:
                continue
            if item_kind is dict and depth < _SETTLE_DEPTH:
                # a message of plain values (the usual history): no call for it
                for key, v in item.items():
                    if type(v) not in _PLAIN_TYPES and key not in _PLAIN_KEYS:
                        break
                else:
                    continue
            settled = _settle(item, depth + 1, failed)
            if settled is not item:
                if listed is None:
                    listed = list(value)
                listed[i] = settled
        return value if listed is None else listed
    if value is None or isinstance(value, _LEAVES):
        return value
    ours = False
    if isinstance(value, Iterator):
        items: list[Any] = []
        try:
            for item in value:
                items.append(item)
        except Exception as exc:  # the application's own error: the SDK must meet it
            failed.append(exc)
            return _replay(items, exc)
        # A BaseException (Ctrl-C, SystemExit) is not held for the SDK to meet: it would be
        # lost if the SDK never read the iterator; it leaves from here, one frame early.
        value, ours = items, True
    if isinstance(value, list):
        listed = value if ours else None
        for i, item in enumerate(value):
            settled = _settle(item, depth + 1, failed)
            if settled is not item:
                if listed is None:
                    listed = list(value)
                listed[i] = settled
        return value if listed is None else listed
    if isinstance(value, tuple):
        settled_items = tuple(_settle(item, depth + 1, failed) for item in value)
        if any(a is not b for a, b in zip(settled_items, value, strict=True)):
            return settled_items
    elif isinstance(value, dict):
        copied = None
        for key, item in value.items():
            if key in _PLAIN_KEYS:
                continue
            settled = _settle(item, depth + 1, failed)
            if settled is not item:
                if copied is None:
                    copied = dict(value)  # the SDK reads any mapping as a dict
                copied[key] = settled
        return value if copied is None else copied
    return value




class Unsettled(Exception):
    """Raised by a reader when an iterator in a message it settles raised (see
    ``settle_message``): the request is not read, as when ``_materialize`` fails."""


def settle_message(messages: list[Any], i: int, failed: list[BaseException]) -> Any:
    """``_materialize`` for ``messages[i]`` (the request's list, ours: a copy of the
    application's, written back into the request), for a
    reader that settles its messages as it reads them: a message its loop has seen to be a
    role and a string alone needs no call. When an iterator raised, the rest of the list is
    settled (as ``_materialize`` does) and ``Unsettled`` raised."""
    m = messages[i]
    settled = _settle(m, 1, failed)
    if settled is not m:
        messages[i] = settled
    if failed:
        for j in range(i + 1, len(messages)):
            item = messages[j]
            settled = _settle(item, 1, failed)
            if settled is not item:
                messages[j] = settled
        raise Unsettled
    return settled


def _plain_messages(value: list[Any]) -> bool:
    """Whether every element is a dict holding only plain values (strings, numbers, None)
    or dicts of them (a cache breakpoint): nothing in it to settle. A plain loop: on this
    interpreter cheaper than C passes over ``map``/``chain`` (a view and an iterator made
    per message); a role and a string alone (the usual message) by subscripts, without
    the view."""
    for message in value:
        if type(message) is not dict:
            return False
        try:
            if (len(message) == 2 and type(message["content"]) is str
                    and type(message["role"]) is str):
                continue
        except KeyError:
            pass
        for item in message.values():
            kind = type(item)
            if kind in _PLAIN_TYPES:
                continue
            if kind is not dict:
                return False
            for inner in item.values():
                if type(inner) not in _PLAIN_TYPES:
                    return False
    return True


def _replay(items: list[Any], exc: BaseException) -> Iterator[Any]:
    yield from items
    raise exc


def _begin(tel: ClientTelemetry, api: Api, instance: Any, args: tuple[Any, ...],
           kwargs: dict[str, Any], light: bool = False, wrapped: Any = None) -> Call | None:
    """``tel.start`` (guarded as it is, without its wrapper's call) for the client's
    ``instance``. ``light``: whether the wrapper can tell a stream (followed by our stream
    wrappers, the light invocation timing its chunks as util-genai's does) from a plain
    call."""
    host, port = _server(instance)
    try:
        # another wrapper between us and the client's method (the official GenAI
        # instrumentor wrapped before us) may open an inference of its own inside ours:
        # util-genai merges it into ours through the data ours publishes
        return Call(tel, api, args, kwargs, host, port, light and tel.light,
                    isinstance(wrapped, _PROXY))
    except Exception:
        if _strict_now():
            raise
        _log_failed(_START)
        return None


_START = inspect.unwrap(ClientTelemetry.start)


#: what wrapt's function wrappers derive from (wrapt 2: BaseObjectProxy; 1.x: ObjectProxy)
_PROXY = getattr(wrapt, "BaseObjectProxy", wrapt.ObjectProxy)


@guarded
def _complete(call: Call, api: Api, result: Any) -> Any:
    """Finish a non-streaming call from its result; returns what the app gets."""
    fields = None
    try:
        target = result
        if not hasattr(result, "usage") and callable(getattr(result, "parse", None)):
            target = result.parse()  # with_raw_response: parsed once, cached by the SDK
        plain = api.plain_response
        if (plain is not None and (call.record is not None or call.budget is not None)
                and not call.tel.capture):
            try:
                fields = plain(target)
            except Exception:  # ours: the general reader reads it (raised when strict)
                if _strict_now():
                    raise
                _log.debug("otel_agent_context: the one-pass response reader failed",
                           exc_info=True)
    except Exception:
        _unreadable(call)
        return
    # the call's end outside the reading's guard, as finish() is: its errors are logged
    # as the call's, not as an unreadable response
    if fields is not None and call.finish_plain(fields):
        return
    try:
        out = api.parse_response(target, call.tel.capture)
    except Exception:
        _unreadable(call)
        return
    call.finish(out)


def _unreadable(call: Call) -> None:
    """A response we could not read (in its ``except`` block): the call ended without it,
    then the error raised in strict mode (the call never left open)."""
    call.finish(None)
    if _strict_now():
        raise  # noqa: PLE0704 - re-raises the exception being handled by the caller
    _log.debug("otel_agent_context: could not read the response", exc_info=True)


def _wrap_result(call: Call, api: Api, result: Any, streaming: bool, is_async: bool) -> Any:
    if not streaming:
        if (not hasattr(result, "usage") and hasattr(result, "http_response")
                and not getattr(result.http_response, "is_stream_consumed", True)
                and callable(getattr(result, "parse", None))):
            # with_streaming_response: the body is the application's to read (parse(),
            # iter_bytes(), ...); reading it first would take it away
            _follow_raw(call, api, result, is_async, streaming=False)
            return result
        _complete(call, api, result)
        return result
    if hasattr(result, "http_response") and callable(getattr(result, "parse", None)):
        # a raw response (the official instrumentor's proxy of one, too: it has __iter__)
        _follow_raw(call, api, result, is_async, streaming=True)
        return result
    return _follow_stream(call, api, result, is_async)


def _follow_stream(call: Call, api: Api, stream: Any, is_async: bool) -> Any:
    """The SDK stream wrapped so the call finishes with it (or ``stream`` itself, the call
    finished, when it is nothing we know how to follow)."""
    if not hasattr(stream, "__iter__") and not hasattr(stream, "__aiter__"):
        call.finish(None)
        return stream
    try:
        acc = api.accumulator(call.tel.capture)
        wrapped = (OurAsyncStream if is_async else OurSyncStream)(stream, call, acc)
        env = call.env
        if call.own_env and isinstance(call.invocation, _SUPPRESSED):
            # the official instrumentor's wrapper, outside ours, ends the span: dropped
            # unread, it is collected (and ends it) before ours, whose end comes too late
            if call.record is not None:
                call.record.write_final_early()
            elif env is not None:
                env._write_final_early()
        return wrapped
    except Exception:
        if _strict_now():
            raise
        _log.warning("otel_agent_context: could not wrap the stream", exc_info=True)
        call.finish(None)
        return stream


def _follow_raw(call: Call, api: Api, raw: Any, is_async: bool, *, streaming: bool) -> None:
    """A raw response (``with_raw_response`` / ``with_streaming_response``): the call is
    read from what the application's first plain ``raw.parse()`` returns (the SDKs cache it,
    so every call gets the same object): the stream, followed to its end (LangChain's
    ChatOpenAI streams this way with ``include_response_headers``), or the response. A raw
    response dropped unparsed finishes the call without response data."""
    parse = raw.parse
    call.invocation.suspend()  # control goes back to the application
    followed: list[Any] = []  # what parse() gave, held by raw's own parse (below)
    # what the finalizer holds: whether parse() was followed, never its result. The
    # finalizer is held globally until raw is collected, and the result can lead back to
    # raw (an outer instrumentor's proxy of raw hooks the stream's HTTP response): holding
    # it would keep raw, the stream and the outer span (current, unended) for good.
    parsed_once: list[bool] = []

    def follow(result: Any) -> Any:
        if not followed:
            if streaming:
                followed.append(_follow_stream(call, api, result, is_async))
            else:
                _complete(call, api, result)
                followed.append(result)
            parsed_once.append(True)  # followed (a failure above leaves it to the finalizer)
        return followed[0]

    # the application's read of the body under way (parse(), read(), text(), json()): the
    # HTTP response's close at the body's end is the read's, not the call's end
    reading: list[bool] = []

    async def awaited(pending: Any) -> Any:
        reading.append(True)
        try:
            return await pending
        finally:
            reading.pop()

    async def follow_awaited(pending: Any) -> Any:
        return follow(await awaited(pending))

    def marked(read: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(read)
        def read_marked(*args: Any, **kwargs: Any) -> Any:
            reading.append(True)
            try:
                result = read(*args, **kwargs)
            finally:
                reading.pop()
            # the async client's: its read runs when awaited
            return awaited(result) if inspect.isawaitable(result) else result
        return read_marked

    parsed_plain = marked(parse)

    @functools.wraps(parse)
    def parsed(*args: Any, **kwargs: Any) -> Any:
        if args or kwargs:  # parse(to=...): another view, not what we follow
            return parsed_plain(*args, **kwargs)
        reading.append(True)
        try:
            result = parse()
        finally:
            reading.pop()
        if inspect.isawaitable(result):  # the async with_streaming_response
            return follow_awaited(result)
        return follow(result)

    def ended(caller: Any, handled: BaseException | None) -> None:
        # closed unparsed (``with_streaming_response``'s block left, or its body's bytes
        # or lines read to the end, which closes the HTTP response): the call ends now,
        # not when raw is collected, and before the HTTP response's close, which ends the
        # span of an instrumentor outside ours (the official one's proxy of a stream)
        if not parsed_once and not reading:
            parsed_once.append(True)
            guarded(call.finish)(None)

    try:
        weakref.finalize(raw, _unparsed, call, parsed_once)
        raw.parse = parsed
        read = getattr(raw, "read", None)  # text() and json() read through it
        if callable(read):
            raw.read = marked(read)
        on_close(raw, ended, first=True)
        http = getattr(raw, "http_response", None)
        if http is not None:
            on_close(http, ended, first=True)
            on_close(http, ended, first=True, method="aclose")
    except Exception:
        if _strict_now():
            raise
        call.finish(None)


def on_close(target: Any, then: Callable[[Any, BaseException | None], None], *,
             first: bool = False, method: str = "close") -> None:
    """Make ``target.close()`` (``method``; sync or async, as its own is) call
    ``then(caller, handled)`` once it has closed (``first``: before it closes): ``caller``
    the frame that called it, ``handled`` the error being handled there (if any). For a
    call that ends when what it returned is closed. Nothing when ``target`` has no such
    method; raises what setting the attribute raises."""
    close = getattr(target, method, None)
    if not callable(close):
        return

    @functools.wraps(close)
    def closed(*args: Any, **kwargs: Any) -> Any:
        caller, handled = sys._getframe(1), sys.exc_info()[1]
        if first:
            then(caller, handled)
            return close(*args, **kwargs)
        try:
            return close(*args, **kwargs)
        finally:
            then(caller, handled)

    @functools.wraps(close)
    async def closed_async(*args: Any, **kwargs: Any) -> Any:
        caller, handled = sys._getframe(1), sys.exc_info()[1]
        if first:
            then(caller, handled)
            return await close(*args, **kwargs)
        try:
            return await close(*args, **kwargs)
        finally:
            then(caller, handled)

    setattr(target, method, closed_async if inspect.iscoroutinefunction(close) else closed)


# closures that stand between the application and the client (raw.parse(), close())
_frames.hide(_frames.nested(_follow_raw, "parsed"), _frames.nested(on_close, "closed"),
             _frames.nested(OurSyncStream.__init__, "closing"),
             _frames.nested(OurAsyncStream.__init__, "closing"))


def _unparsed(call: Call, parsed_once: list[bool]) -> None:
    if not parsed_once:
        guarded(call.finish)(None)


#: The application's error leaving an SDK stream helper's ``with`` block (OpenAI's
#: ``responses.stream()``, ``chat.completions.stream()``): the helper's manager exits by
#: closing the stream's HTTP response, which ends the call (``OurSyncStream``'s
#: ``closing``) as failed with it rather than as a stream closed early.
_HELPER_EXIT_ERROR: contextvars.ContextVar[BaseException | None] = contextvars.ContextVar(
    "otel_agent_context.helper_exit_error", default=None)


def _exit_error(args: tuple[Any, ...], kwargs: dict[str, Any]) -> BaseException | None:
    """The exception an ``__exit__(exc_type, exc, tb)`` call was given, if any."""
    error = args[1] if len(args) > 1 else kwargs.get("exc")
    return error if isinstance(error, BaseException) else None


def helper_exit(wrapped: Any, instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
    """A stream helper manager's ``__exit__``: the application's error known to the call's
    end while the manager closes the stream."""
    error = _exit_error(args, kwargs)
    if error is None:
        return wrapped(*args, **kwargs)
    token = _HELPER_EXIT_ERROR.set(error)
    try:
        return wrapped(*args, **kwargs)
    finally:
        _HELPER_EXIT_ERROR.reset(token)


async def helper_aexit(wrapped: Any, instance: Any, args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
    """:func:`helper_exit` for an async manager's ``__aexit__``."""
    error = _exit_error(args, kwargs)
    if error is None:
        return await wrapped(*args, **kwargs)
    token = _HELPER_EXIT_ERROR.set(error)
    try:
        return await wrapped(*args, **kwargs)
    finally:
        _HELPER_EXIT_ERROR.reset(token)


def sync_wrapper(tel: ClientTelemetry, api: Api) -> Callable[..., Any]:
    """A wrapt wrapper for a sync ``create``."""
    is_stream = api.is_stream_call

    def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> Any:
        live = tel.live.current
        if live is None:
            return wrapped(*args, **kwargs)
        try:  # None: its ``stream`` argument cannot say (the client rejects it, recorded
            # as the call's error, as without the light path)
            streaming: bool | None = bool(is_stream(kwargs))
        except Exception:
            streaming = None
        call = _begin(live, api, instance, args, kwargs, streaming is not None, wrapped)
        if call is None:
            return wrapped(*args, **kwargs)
        try:
            result = wrapped(*args, **kwargs)
        except BaseException as exc:
            _fail(call, exc)
            raise
        if streaming is None:  # the client took what we could not read: ask again
            streaming = api.is_stream_call(kwargs)
        return _wrap_result(call, api, result, streaming, False)

    return wrapper


def async_wrapper(tel: ClientTelemetry, api: Api) -> Callable[..., Any]:
    """A wrapt wrapper for an async ``create``."""
    is_stream = api.is_stream_call

    async def wrapper(wrapped: Callable[..., Any], instance: Any, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> Any:
        live = tel.live.current
        if live is None:
            return await wrapped(*args, **kwargs)
        try:  # None: its ``stream`` argument cannot say (the client rejects it, recorded
            # as the call's error, as without the light path)
            streaming: bool | None = bool(is_stream(kwargs))
        except Exception:
            streaming = None
        call = _begin(live, api, instance, args, kwargs, streaming is not None, wrapped)
        if call is None:
            return await wrapped(*args, **kwargs)
        try:
            result = await wrapped(*args, **kwargs)
        except BaseException as exc:
            _fail(call, exc)
            raise
        if streaming is None:  # the client took what we could not read: ask again
            streaming = api.is_stream_call(kwargs)
        if not streaming and _read_raw(result):
            # a raw response whose body was read: parsed here, as the sync path parses it
            # (the SDKs cache what parse() returns), awaited when parse() is a coroutine
            # (Anthropic's), so the call ends before an outer instrumentor ends the span
            try:
                parsed = result.parse()
                if inspect.isawaitable(parsed):
                    parsed = await parsed
            except Exception:
                _unreadable(call)
                return result
            except BaseException:  # cancelled while a parse() paused: the call ends first
                guarded(call.finish)(None)
                raise
            _complete(call, api, parsed)
            return result
        return _wrap_result(call, api, result, streaming, True)

    return wrapper


def _read_raw(result: Any) -> bool:
    """Whether ``result`` is a raw response (``with_raw_response``) whose body was read."""
    try:
        return (not hasattr(result, "usage") and hasattr(result, "http_response")
                and getattr(result.http_response, "is_stream_consumed", False) is True
                and callable(getattr(result, "parse", None)))
    except Exception:  # an object of the application's or another wrapper's: not ours
        return False


@guarded
def _fail(call: Call, exc: BaseException) -> None:
    call.fail(exc)


class Wrapped(dict):  # type: ignore[type-arg]
    """The (class, method) pairs wrapped so far, each with the wrapper function put on it
    (what ``unwrap_all`` looks for); ``active`` is False once unwrapped (a module imported
    later is then left alone)."""

    active = True
    #: whether this set of wrappers holds an install of the warnings' frame counting
    hooked = False


def wrap_all(targets: Sequence[tuple[str, str, Callable[..., Any]]]) -> Wrapped:
    """Wrap each (module, "Class.method", wrapper) when its module is imported: now if the
    application imported it already, else from a post-import hook. Instrumenting imports
    no client library (``openai`` alone takes a second or more to import), so an
    application pays only for the libraries it uses. Returns what to unwrap."""
    done = Wrapped()
    for _, _, wrapper in targets:
        _frames.hide(wrapper)  # a warning's stacklevel passes over our frame
    by_module: dict[str, list[tuple[str, Callable[..., Any]]]] = {}
    for module_name, name, wrapper in targets:
        by_module.setdefault(module_name, []).append((name, wrapper))

    for module_name, wanted in by_module.items():
        def apply(module: Any, wanted: list[tuple[str, Callable[..., Any]]] = wanted) -> None:
            if not done.active:
                return
            for name, wrapper in wanted:
                try:
                    cls_name, _, method = name.partition(".")
                    cls = getattr(module, cls_name, None)
                    if cls is None or not hasattr(cls, method) or (cls, method) in done:
                        continue
                    wrapt.wrap_function_wrapper(module, name, wrapper)
                    done[cls, method] = wrapper
                    if not done.hooked:  # once a wrapper of ours stands in a call path
                        _frames.install()
                        done.hooked = True
                except Exception:  # noqa: BLE001 - a library we cannot wrap: left alone
                    _log.warning("otel_agent_context: cannot instrument %s.%s",
                                 getattr(module, "__name__", "?"), name, exc_info=True)

        # wrapt calls the hook at once when the module is already imported
        wrapt.register_post_import_hook(apply, module_name)
    return done


def unwrap_all(done: Wrapped | list[tuple[Any, str]]) -> None:
    """Take our wrappers off, each where it is: another instrumentor's wrapper put on after
    ours (outside it: the official one instrumented later) stays, around what ours wrapped
    (``unwrap`` takes off the outermost, whoever's it is)."""
    from opentelemetry.instrumentation.utils import unwrap

    if isinstance(done, Wrapped):
        done.active = False  # hooks still pending do nothing from now on
        if done.hooked:
            done.hooked = False
            _frames.uninstall()
    for cls, method in done:
        wrapper = done[cls, method] if isinstance(done, Wrapped) else None
        if wrapper is None or not _unwrap_own(cls, method, wrapper):
            # ours is gone: another instrumentor's ``unwrap`` took it off in place of its
            # own (ours was outside it), whose wrapper, left inert, is now the outermost
            unwrap(cls, method)
    done.clear()


def _unwrap_own(cls: Any, method: str, wrapper: Callable[..., Any]) -> bool:
    """Take the wrapt layer of ``wrapper`` off ``cls.method``, wherever it is in the chain
    of wrappers; False when it is not in the chain."""
    above = None
    layer = vars(cls).get(method)
    for _ in range(64):  # a chain of wrappers, never a cycle; bounded all the same
        if not isinstance(layer, _PROXY):
            return False
        # a plain proxy passes ``_self_wrapper`` on to what it wraps: read on wrappers only
        if isinstance(layer, _FUNCTION_WRAPPER) and layer._self_wrapper is wrapper:
            if above is None:
                setattr(cls, method, layer.__wrapped__)
            else:
                above.__wrapped__ = layer.__wrapped__
            return True
        above, layer = layer, layer.__wrapped__
    return False


_FUNCTION_WRAPPER = wrapt.FunctionWrapper
