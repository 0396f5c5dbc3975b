"""LlamaIndex nodes and chat messages as context items."""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from ..._attributes import digest_text
from ..._digest import short_digest
from ..._enums import ContentMode, ContextKind
from ..._records import ContextItem, ContextSourceRef
from .._tokens import estimate_tokens

__all__ = ["message_id", "message_role", "message_text", "node_id", "node_item", "node_of",
           "node_score", "positional_ids", "text_message_id"]

_URI_KEYS = ("file_path", "url", "source", "file_name")


def node_of(nws: Any) -> Any:
    """The node of a ``NodeWithScore`` (or the node itself)."""
    return getattr(nws, "node", nws)


def node_id(nws: Any) -> str | None:
    nid = getattr(node_of(nws), "node_id", None)
    return nid if isinstance(nid, str) and nid else None


def node_score(nws: Any) -> float | None:
    score = getattr(nws, "score", None)
    if isinstance(score, (int, float)) and not isinstance(score, bool):
        return float(score)
    return None


def node_text(nws: Any) -> str:
    """The node's text without its metadata (what every prompt of it contains)."""
    node = node_of(nws)
    try:
        text = node.get_content(metadata_mode="none")
    except Exception:  # noqa: BLE001 - a node type of its own: its text attribute
        text = getattr(node, "text", None)
    return text if isinstance(text, str) else ""


#: Copied for each node item instead of constructing (and validating) a record: every field
#: set below has its checked type already (strings, ints, a fresh list of source refs), and
#: validating a record per node was most of a retrieval's cost. The copies share the
#: template's other (empty) containers, which nothing mutates.
_ITEM = ContextItem(item_id="-", context_kind=ContextKind.RETRIEVAL_RESULT,
                    content_mode=ContentMode.INLINE)
_SOURCE = ContextSourceRef(source_kind="document")


def node_item(nws: Any, item_id: str) -> ContextItem:
    """A retrieved node as a ``retrieval_result`` item (its text exported only under capture)."""
    node = node_of(nws)
    text = node_text(nws)
    md = getattr(node, "metadata", None)
    md = md if isinstance(md, Mapping) else {}
    uri = next((str(md[k]) for k in _URI_KEYS if md.get(k) is not None), None)
    ref_doc = getattr(node, "ref_doc_id", None)
    title = md.get("title")
    item = copy.copy(_ITEM)
    item.item_id = item_id
    item.content = text
    item.digest = digest_text(text)  # once, not once per event of the item
    item.title = title if isinstance(title, str) else None
    item.token_estimate = estimate_tokens(text)
    item.byte_size = len(text.encode("utf-8", "surrogatepass"))
    if uri is not None or isinstance(ref_doc, str):
        ref = copy.copy(_SOURCE)
        ref.source_id = ref_doc if isinstance(ref_doc, str) else None
        ref.uri = uri
        item.source_refs = [ref]
    else:
        item.source_refs = []
    return item


def message_text(message: Any) -> str:
    content = getattr(message, "content", None)
    return content if isinstance(content, str) else ""


def message_id(message: Any) -> str:
    """A chat message's id: LlamaIndex messages have none, so a keyed short digest of its
    role and text (the same message is the same item in every turn)."""
    return text_message_id(message_role(message), message_text(message))


def message_role(message: Any) -> str:
    role = getattr(message, "role", "")
    if type(role) is str:
        return role
    # an Enum member (``MessageRole``): its value without going through the property
    value = getattr(role, "_value_", _NO_VALUE)
    if value is _NO_VALUE:
        value = getattr(role, "value", role)
    return value if type(value) is str else str(value)


_NO_VALUE = object()


def text_message_id(role: str, text: str) -> str:
    return "llama_index_msg:" + short_digest(role, text, length=16)


def positional_ids(history: Sequence[Any], wanted: Sequence[Any],
                   new_input: tuple[str, str] | None = None,
                   keys: dict[int, tuple[str, str]] | None = None,
                   ) -> tuple[dict[int, str], str | None]:
    """The ids of the messages of ``wanted`` (by ``id()``) by their place in ``history``, the
    conversation from its start: the first message of a role and text is its ``message_id``,
    a later identical one ``<id>#2``, ``#3``... (the suffix an assembly gives a repeated
    block), so that the id is stable across calls while the conversation grows and two
    identical messages at different positions are told apart. ``new_input`` (role, text):
    the message about to follow the history, and its id. ``keys``, when given, receives each
    history message's (role, text) by ``id()`` (a message's text is a property that joins
    its blocks: read once)."""
    want = {id(m) for m in wanted}
    seen: dict[tuple[str, str], int] = {}
    out: dict[int, str] = {}
    for message in history:
        key = (message_role(message), message_text(message))
        if keys is not None:
            keys[id(message)] = key
        n = seen[key] = seen.get(key, 0) + 1
        if id(message) in want:
            base = text_message_id(*key)
            out[id(message)] = base if n == 1 else f"{base}#{n}"
    for message in wanted:  # not in the history given: by its content alone
        if id(message) not in out:
            out[id(message)] = message_id(message)
    if new_input is None:
        return out, None
    base = text_message_id(*new_input)
    n = seen.get(new_input, 0) + 1
    return out, base if n == 1 else f"{base}#{n}"
