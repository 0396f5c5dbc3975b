"""Records to span/event attributes: the emitter half of the one mapping.

The rebuild (``rebuild/_rebuild.py``) reads back exactly what these functions write.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from . import _semconv as S
from ._records import ContextItem, ContextSourceRef, rfc3339_to_ns

__all__ = ["digest_text", "item_attributes", "source_attributes"]


def digest_text(text: str | bytes) -> str:
    """``sha256:<hex>`` of text (UTF-8) or bytes: the digest recorded with or without content."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _value(v: Any) -> Any:
    # StrEnum members are str subclasses; exporters want the plain value.
    return v.value if hasattr(v, "value") else v


def source_attributes(src: ContextSourceRef, out: dict[str, Any]) -> None:
    if src.source_id is not None:
        out[S.SOURCE_ID] = src.source_id
    if src.uri is not None:
        out[S.SOURCE_URI] = src.uri
    if src.source_kind is not None:
        out[S.SOURCE_KIND] = src.source_kind
    if src.selector is not None:
        out[S.SOURCE_SELECTOR] = src.selector
    if src.digest is not None:
        out[S.SOURCE_DIGEST] = src.digest
    if src.authority is not None:
        out[S.SOURCE_AUTHORITY] = src.authority
    if src.license is not None:
        out[S.SOURCE_LICENSE] = src.license
    if src.retrieved_at is not None:
        out[S.SOURCE_RETRIEVED_AT] = src.retrieved_at
    if src.modified_at is not None:
        out[S.SOURCE_MODIFIED_AT] = src.modified_at
    if src.provenance_refs:
        out[S.SOURCE_PROVENANCE_REFS] = tuple(src.provenance_refs)
    for key, native in src.external_mappings.items():
        out[S.NATIVE_REUSED.get(key) or S.SOURCE_NATIVE_PREFIX + key] = native


def item_attributes(item: ContextItem, capture_content: bool,
                    blocked_sensitivities: frozenset[str]) -> tuple[dict[str, Any], bool]:
    """Attributes of an item event, and whether content was withheld by the sensitivity
    policy (the caller then records a ``context.redaction.applied`` event).
    ``blocked_sensitivities`` holds lower-case names; matching ignores case."""
    out: dict[str, Any] = {S.ITEM_ID: item.item_id}
    if item.context_kind is not None:
        out[S.ITEM_KIND] = item.context_kind._value_  # _value_: no descriptor call
    if item.content_mode is not None:
        out[S.ITEM_CONTENT_MODE] = item.content_mode._value_
    withheld = False
    if capture_content:
        if item.sensitivity is not None and item.sensitivity.lower() in blocked_sensitivities:
            withheld = item.content is not None or item.title is not None
        else:
            if item.title is not None:
                out[S.ITEM_TITLE] = item.title
            if item.content is not None:
                out[S.ITEM_CONTENT] = item.content
    if item.content_ref is not None:
        out[S.ITEM_CONTENT_REF] = item.content_ref
    if item.mime_type is not None:
        out[S.ITEM_MIME_TYPE] = item.mime_type
    if item.language is not None:
        out[S.ITEM_LANGUAGE] = item.language
    if item.token_estimate is not None:
        out[S.ITEM_TOKEN_ESTIMATE] = item.token_estimate
    if item.byte_size is not None:
        out[S.ITEM_BYTE_SIZE] = item.byte_size
    if item.freshness is not None:
        out[S.ITEM_FRESHNESS] = item.freshness
    if item.trust_level is not None:
        out[S.ITEM_TRUST_LEVEL] = item.trust_level
    if item.sensitivity is not None:
        out[S.ITEM_SENSITIVITY] = item.sensitivity
    if item.redaction_state is not None:
        out[S.ITEM_REDACTION_STATE] = item.redaction_state._value_
    if item.visibility:
        out[S.ITEM_VISIBILITY] = tuple(v._value_ for v in item.visibility)
    if item.priority is not None:
        out[S.ITEM_PRIORITY] = item.priority
    if item.digest is not None:
        out[S.ITEM_DIGEST] = item.digest
    elif item.content is not None:
        out[S.ITEM_DIGEST] = digest_text(item.content)
    if item.created_at is not None:
        out[S.ITEM_CREATED_AT] = item.created_at
    if item.source_refs:
        # The contract carries one source ref per item event: the first, the item's origin.
        source_attributes(item.source_refs[0], out)
    return out, withheld


def ordered_hash(parts: Iterable[str]) -> str:
    """``sha256:`` over ordered parts, newline-separated (assembly and injection hashes)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8"))
        h.update(b"\n")
    return "sha256:" + h.hexdigest()


def to_ns(value: int | str | None) -> int | None:
    """A timestamp given as nanoseconds or RFC 3339 text, as nanoseconds."""
    if value is None or isinstance(value, int):
        return value
    return rfc3339_to_ns(value)
