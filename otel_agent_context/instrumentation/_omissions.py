"""Why a framework component (a document filter, a node postprocessor, a reranker) left an
item out: the omission reason and the detail naming the component and its parameters.
Shared by the LangChain and LlamaIndex instrumentors."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from .._enums import OmissionReason

__all__ = ["describe_component"]


def describe_component(component: Any, params: Sequence[str], why: Mapping[str, str],
                       duplicates: Collection[str], counted: Sequence[str] = (),
                       ) -> tuple[OmissionReason, str]:
    """``<Class>(<numeric params>, <counted list params>=<length>): <why>``; the reason is
    ``duplicate_coverage`` for the classes in ``duplicates``, else ``low_relevance``. Lists in
    ``counted`` (keywords...) give their length only, never their values."""
    name = type(component).__name__
    shown = []
    for attr in params:
        value = getattr(component, attr, None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shown.append(f"{attr}={value}")
    for attr in counted:
        value = getattr(component, attr, None)
        if isinstance(value, (list, tuple, set)) and value:
            shown.append(f"{attr}={len(value)}")
    detail = f"{name}({', '.join(shown)})" if shown else name
    reason_text = why.get(name)
    if reason_text:
        detail = f"{detail}: {reason_text}"
    reason = (OmissionReason.DUPLICATE_COVERAGE if name in duplicates
              else OmissionReason.LOW_RELEVANCE)
    return reason, detail
