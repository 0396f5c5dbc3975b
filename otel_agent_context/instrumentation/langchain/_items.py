"""LangChain documents and messages as context items, and matching documents across steps.

Item ids must stay the same from the candidate a retriever returned to the document a
compressor kept (often a copy, sometimes without its ``id``): :class:`DocIndex` resolves a
document to the id it got when first seen, by object, native id, content and metadata.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable, Mapping
from typing import Any

from ..._digest import short_digest
from ..._enums import ContentMode, ContextKind
from ..._records import ContextItem, ContextSourceRef
from .._common import message_id as reader_message_id
from .._common import numbered
from .._tokens import estimate_tokens

__all__ = [
    "DocIndex",
    "doc_item",
    "doc_scores",
    "doc_text",
    "call_id",
    "ROLES",
    "call_ids",
    "message_id",
    "message_kind",
    "message_role",
    "message_type",
    "named_by_reader",
    "positional_ids",
    "text_parts",
    "message_text",
    "message_tokens",
]

#: Metadata keys that carry a relevance score, in the order the primary score is taken.
SCORE_KEYS = ("score", "relevance_score", "similarity_score", "_similarity_score",
              "rerank_score")
#: Set by ``EmbeddingsFilter`` on the state of the documents it keeps.
_STATE_SCORE = "query_similarity_score"
_ID_KEYS = ("id", "doc_id", "document_id")
_URI_KEYS = ("source", "url", "file_path", "path")
#: ``additional_kwargs["lc_source"]`` of the summary message LangChain's middleware writes.
SUMMARY_SOURCE = "summarization"


def _short_hash(*parts: str) -> str:
    return short_digest(*parts, length=16)  # keyed: an id must not reveal the text


# -- documents ------------------------------------------------------------------------------


def doc_text(doc: Any) -> str:
    text = getattr(doc, "page_content", None)
    return text if isinstance(text, str) else ""


def _metadata(doc: Any) -> Mapping[str, Any]:
    md = getattr(doc, "metadata", None)
    return md if isinstance(md, Mapping) else {}


def _metadata_key(doc: Any) -> str:
    return json.dumps(_metadata(doc), sort_keys=True, default=str)


def _native_id(doc: Any) -> str | None:
    native = getattr(doc, "id", None)
    if isinstance(native, str) and native:
        return native
    md = _metadata(doc)
    for key in _ID_KEYS:
        value = md.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _derived_id(doc: Any) -> str:
    native = _native_id(doc)
    if native is not None:
        return native
    md = _metadata(doc)
    uri = next((str(md[k]) for k in _URI_KEYS if md.get(k) is not None), "")
    return "doc_" + _short_hash(uri, doc_text(doc))


def doc_scores(doc: Any) -> dict[str, float]:
    """Numeric relevance scores a document carries (metadata, or a compressor's state)."""
    out: dict[str, float] = {}
    md = _metadata(doc)
    for key in SCORE_KEYS:
        value = md.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            out[key] = float(value)
    state = getattr(doc, "state", None)
    if isinstance(state, Mapping):
        value = state.get(_STATE_SCORE)
        try:
            if value is not None:
                out[_STATE_SCORE] = float(value)
        except (TypeError, ValueError):
            pass
    return out


def _source_ref(doc: Any, source_kind: str | None) -> ContextSourceRef | None:
    md = _metadata(doc)
    uri = next((str(md[k]) for k in _URI_KEYS if md.get(k) is not None), None)
    selector = None
    for key, kind in (("page", "page"), ("start_index", "char_offset"), ("row", "row")):
        value = md.get(key)
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            selector = f"{kind}:{value}"
            break
    native = getattr(doc, "id", None)
    source_id = native if isinstance(native, str) and native else None
    if uri is None and source_id is None and selector is None:
        return None
    return ContextSourceRef(source_id=source_id, uri=uri, source_kind=source_kind or "document",
                            selector=selector)


def doc_item(doc: Any, item_id: str, source_kind: str | None,
             origin: Any = None) -> ContextItem:
    """A retrieved document as a ``retrieval_result`` item (content sent only under capture).

    ``origin``: the candidate ``doc`` was made from (a compressor's copy, which may have lost
    the id, or an extract of it): the source reference and title come from there.
    """
    text = doc_text(doc)
    origin = doc if origin is None else origin
    md = _metadata(origin)
    title = md.get("title")
    sensitivity = md.get("sensitivity")
    src = _source_ref(origin, source_kind)
    # copied from a template, not constructed: every field set has its checked type already
    # (validating a record per document was most of a retrieval's cost)
    item = copy.copy(_ITEM)
    item.item_id = item_id
    item.content = text
    item.title = title if isinstance(title, str) else None
    item.token_estimate = estimate_tokens(text)
    item.byte_size = len(text.encode("utf-8", "surrogatepass"))
    item.sensitivity = sensitivity if isinstance(sensitivity, str) else None
    item.source_refs = [src] if src is not None else []
    return item


#: The record :func:`doc_item` copies (its other, empty containers are shared and never
#: mutated).
_ITEM = ContextItem(item_id="-", context_kind=ContextKind.RETRIEVAL_RESULT,
                    content_mode=ContentMode.INLINE)


class DocIndex:
    """Item ids of the documents seen in one retrieval, in first-seen order."""

    def __init__(self) -> None:
        self.docs: dict[str, Any] = {}  # item id -> the first document seen with it
        self._by_obj: dict[int, str] = {}
        self._by_native: dict[str, str] = {}
        self._by_content: dict[tuple[str, str], str] = {}
        self._by_metadata: dict[str, str | None] = {}  # None: ambiguous
        self._keep: list[Any] = []  # keeps id() keys valid

    def find(self, doc: Any) -> str | None:
        return self._lookup(doc)[0]

    def _lookup(self, doc: Any) -> tuple[str | None, str | None]:
        """The document's item id if seen, and its metadata key when it was computed."""
        iid = self._by_obj.get(id(doc))
        if iid is not None:
            return iid, None
        native = _native_id(doc)
        if native is not None and native in self._by_native:
            return self._by_native[native], None
        mkey = _metadata_key(doc)
        iid = self._by_content.get((doc_text(doc), mkey))
        if iid is not None:
            return iid, mkey
        # a compressor that rewrote the text (an extractor) keeps the metadata
        return (self._by_metadata.get(mkey) if mkey != "{}" else None), mkey

    def add(self, doc: Any) -> str:
        iid, mkey = self._lookup(doc)
        if iid is None:
            iid = base = _derived_id(doc)
            n = 1
            while iid in self.docs:
                n += 1
                iid = f"{base}#{n}"
            self.docs[iid] = doc
            native = _native_id(doc)
            if native is not None:
                self._by_native.setdefault(native, iid)
            if mkey is None:  # (the lookup stops before it only for a document already seen)
                mkey = _metadata_key(doc)
            self._by_content.setdefault((doc_text(doc), mkey), iid)
            self._by_metadata[mkey] = None if mkey in self._by_metadata else iid
        self._by_obj[id(doc)] = iid
        self._keep.append(doc)
        return iid

    def add_all(self, docs: Iterable[Any]) -> list[str]:
        return [self.add(d) for d in docs]


# -- messages -------------------------------------------------------------------------------


def text_parts(message: Any) -> list[str]:
    """The texts of a message's content: the string, or the strings and text blocks of a
    list, in order."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return [content]
    parts: list[str] = []
    if isinstance(content, list):
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping) and isinstance(block.get("text"), str):
                parts.append(block["text"])
    return parts


def message_text(message: Any) -> str:
    """The text of a message's content (string, or the text blocks of a list)."""
    content = getattr(message, "content", None)
    if isinstance(content, str):
        return content
    return "".join(text_parts(message))


def _read_text(message: Any) -> str:
    """A message as the model reads it: its text and the tool calls it makes."""
    text = message_text(message)
    if message_type(message) != "ai":  # (see _calls)
        return text
    for call in getattr(message, "tool_calls", None) or ():
        if isinstance(call, Mapping):
            text += f"\n{call.get('name', '')}({json.dumps(call.get('args'), default=str)})"
    return text


#: Where a content block that is not text keeps what names it (a URL, base64 data, a file
#: id; LangChain's own forms, OpenAI's and Anthropic's), in the order looked for.
_MEDIA_REFS = (("image_url", "url"), ("image_url",), ("url",), ("base64",), ("data",),
               ("file_id",), ("source", "data"), ("source", "url"), ("source", "file_id"),
               ("input_audio", "data"), ("file", "file_data"), ("file", "file_id"))


#: One medium named alike in its forms: LangChain hands its callbacks a message's standard
#: blocks (``{"type": "image", "base64": ...}``) converted to OpenAI's parts (an
#: ``image_url`` of a data URL), while ``trim_messages`` and the middleware see them as given.
_MEDIA_TYPES = {"image_url": "image", "input_audio": "audio"}


def _media_text(message: Any) -> str:
    """What names a message's content blocks that are not text (an image, audio, a file):
    ``[<type> <keyed short digest>]`` each, so two messages of one text and different images
    are two messages; the URL or data is never written."""
    content = getattr(message, "content", None)
    if not isinstance(content, list):
        return ""
    out = ""
    for block in content:
        if not isinstance(block, Mapping) or isinstance(block.get("text"), str):
            continue
        for path in _MEDIA_REFS:
            ref: Any = block
            for key in path:
                ref = ref.get(key) if isinstance(ref, Mapping) else None
            if isinstance(ref, str) and ref:
                break
        else:  # nothing names it: the block as a whole
            ref = json.dumps(block, sort_keys=True, default=str)
        if ref.startswith("data:") and (at := ref.find(";base64,", 5, 200)) > 0:
            ref = ref[at + 8:]  # a data URL names its data, as a block of base64 does
        kind = str(block.get("type"))
        out += f"\n[{_MEDIA_TYPES.get(kind, kind)} {short_digest(ref)}]"
    return out


#: a streamed message's type -> the message's (a history may hold the chunks a stream made)
_CHUNK_TYPES = {"AIMessageChunk": "ai", "HumanMessageChunk": "human",
                "SystemMessageChunk": "system", "ToolMessageChunk": "tool",
                "ChatMessageChunk": "chat"}


def message_type(message: Any) -> str:
    """A message's ``type``, a chunk's as its message's (``AIMessageChunk`` is ``ai``)."""
    kind = getattr(message, "type", None)
    if not isinstance(kind, str):
        return ""
    return _CHUNK_TYPES.get(kind, kind)


def message_tokens(message: Any) -> int:
    """Estimated tokens of a message as the model reads it (an assistant message holding only
    tool calls is not 0 tokens)."""
    return estimate_tokens(_read_text(message))


#: LangChain message type -> the role a client API sends it as
ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
         "developer": "developer"}


def message_role(message: Any) -> str | None:
    """The role a client API sends the message as (a ``ChatMessage``'s own)."""
    kind = message_type(message)
    role = ROLES.get(kind)
    if role is None and kind == "chat":
        role = getattr(message, "role", None)
    return role if isinstance(role, str) and role else None


def call_id(message: Any) -> str | None:
    """A tool message's call id (the client readers name its result by it), if it has one."""
    called = getattr(message, "tool_call_id", None)
    return called if isinstance(called, str) and called else None


def _calls(message: Any, kind: str) -> bool:
    """Whether the message, of type ``kind``, makes tool calls (the clients send malformed
    ones too). Only an AI message has them: a field a pydantic message lacks costs an
    exception to look for."""
    return kind == "ai" and bool(
        getattr(message, "tool_calls", None) or getattr(message, "invalid_tool_calls", None))


def call_ids(message: Any) -> list[str]:
    """The ids of the tool calls an AI message makes, in order (calls without one left out)."""
    if message_type(message) != "ai":
        return []
    calls = getattr(message, "tool_calls", None)
    if not isinstance(calls, list):
        return []
    found = (c.get("id") for c in calls if isinstance(c, Mapping))
    return [c for c in found if isinstance(c, str) and c]


def named_by_reader(message: Any) -> bool:
    """Whether the model call's blocks name the message as :func:`message_id` does without
    being told (no id of its own; a string and no tool calls, or a tool's result)."""
    native = getattr(message, "id", None)
    if isinstance(native, str) and native:
        return False
    kind = message_type(message)
    if kind == "tool" and call_id(message):
        return True
    if type(getattr(message, "content", None)) is not str or _calls(message, kind):
        return False
    return kind in ROLES or (kind == "chat" and message_role(message) is not None)


def message_id(message: Any) -> str:
    """The message's own id; else the one the model call's blocks give it: a tool's result
    ``tool_result:<call id>``, a message of a string ``<role>:<12 hex of its digest>`` (the
    client instrumentors' id); else one derived from its type and what the model reads of
    it, ``msg_<16 hex>`` (its text, tool calls and media: two messages of tool calls alone,
    or of one text and two images, are not one), which the handler gives the model call.
    Stable across calls."""
    native = getattr(message, "id", None)
    if isinstance(native, str) and native:
        return native
    kind = message_type(message)
    if kind == "tool" and (called := call_id(message)):
        return f"tool_result:{called}"
    content = getattr(message, "content", None)
    if type(content) is str and not _calls(message, kind):
        role = message_role(message)
        if role is not None:
            return reader_message_id(role, content)
    return "msg_" + _short_hash(kind, _read_text(message) + _media_text(message))


def positional_ids(messages: Iterable[Any]) -> list[str]:
    """The messages' :func:`message_id`, a repeat of one within the list ``<id>#2``, ``#3``...
    by position (:func:`numbered`): a record names the copy it cut, not its twin."""
    return numbered(map(message_id, messages))


def message_kind(message: Any) -> ContextKind:
    kind = message_type(message)
    if kind == "system":
        return ContextKind.SYSTEM_PROMPT
    if kind == "human":
        extra = getattr(message, "additional_kwargs", None) or {}
        if extra.get("lc_source") == SUMMARY_SOURCE:
            return ContextKind.THREAD_SUMMARY
        return ContextKind.USER_MESSAGE
    if kind == "tool":
        return ContextKind.TOOL_RESULT
    return ContextKind.SESSION_HISTORY


def message_item(message: Any, item_id: str | None = None) -> ContextItem:
    return ContextItem(item_id=item_id or message_id(message), context_kind=message_kind(message),
                       token_estimate=message_tokens(message))
