"""An SDK ``SpanProcessor`` that rebuilds bundles in-process, as envelopes complete."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor

from .. import _semconv as S
from ._rebuild import rebuild_envelope
from ._view import SpanView, view_from_readable_span

__all__ = ["BundleSpanProcessor"]

_log = logging.getLogger("otel_agent_context")

BundleCallback = Callable[[dict[str, Any]], None]


class _Pending:
    __slots__ = ("spans", "expected", "has_envelope", "first_seen")

    def __init__(self) -> None:
        self.spans: list[SpanView] = []
        self.expected: int | None = None
        self.has_envelope = False
        self.first_seen = time.monotonic()


class BundleSpanProcessor(SpanProcessor):
    """Rebuild each envelope when its spans have ended and hand the bundle on.

    ``on_bundle`` receives each bundle dict; ``path`` appends it to a JSON Lines file.
    An envelope is emitted as soon as its envelope span and the ``context.span_count``
    spans it promised have ended; one still waiting after ``envelope_timeout`` seconds (checked
    whenever a span ends, and at flush and shutdown) is emitted ``partial``. Nothing is dropped.
    """

    def __init__(self, on_bundle: BundleCallback | None = None, *, path: str | Path | None = None,
                 envelope_timeout: float = 30.0) -> None:
        if on_bundle is None and path is None:
            raise ValueError("BundleSpanProcessor needs on_bundle or path")
        self._on_bundle = on_bundle
        self._path = Path(path) if path is not None else None
        self._timeout = envelope_timeout
        self._pending: dict[str, _Pending] = {}
        self._lock = threading.Lock()

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        try:
            attrs = span.attributes or {}
            cid = attrs.get(S.CONTEXT_ID)
            if not isinstance(cid, str):
                return
            ready: list[tuple[list[SpanView], tuple[str, ...]]] = []
            with self._lock:
                pending = self._pending.get(cid)
                if pending is None:
                    pending = self._pending[cid] = _Pending()
                pending.spans.append(view_from_readable_span(span))
                if S.CONTEXT_SCOPE in attrs:
                    pending.has_envelope = True
                    count = attrs.get(S.CONTEXT_SPAN_COUNT)
                    pending.expected = count if isinstance(count, int) else 0
                if pending.has_envelope and len(pending.spans) - 1 >= (pending.expected or 0):
                    del self._pending[cid]
                    ready.append((pending.spans, ()))
                ready.extend(self._expired_locked(time.monotonic()))
            for spans, reasons in ready:
                self._emit(spans, reasons)
        except Exception:
            _log.warning("otel_agent_context: bundle rebuild failed", exc_info=True)

    def _expired_locked(self, now: float) -> list[tuple[list[SpanView], tuple[str, ...]]]:
        out = []
        for cid in [c for c, p in self._pending.items() if now - p.first_seen >= self._timeout]:
            reasons: tuple[str, ...] = ("timeout",)
            out.append((self._pending.pop(cid).spans, reasons))
        return out

    def _drain(self, reason: str) -> None:
        with self._lock:
            pending, self._pending = self._pending, {}
        for p in pending.values():
            self._emit(p.spans, (reason,))

    def _emit(self, spans: list[SpanView], reasons: tuple[str, ...]) -> None:
        bundle = rebuild_envelope(spans, partial_reasons=reasons)
        if self._path is not None:
            with self._path.open("ab") as fh:
                fh.write(orjson.dumps(bundle) + b"\n")
        if self._on_bundle is not None:
            self._on_bundle(bundle)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Emit envelopes whose wait has expired; open ones keep waiting."""
        with self._lock:
            ready = self._expired_locked(time.monotonic())
        for spans, reasons in ready:
            self._emit(spans, reasons)
        return True

    def shutdown(self) -> None:
        """Emit everything still pending, marked partial (``shutdown``)."""
        self._drain("shutdown")
