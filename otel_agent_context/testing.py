"""In-memory capture for tests: spans, metrics and logs, with deterministic ids.

    from otel_agent_context.testing import CapturedTelemetry

    tel = CapturedTelemetry()
    with tel.agent_context.envelope(agent_name="demo") as env:
        ...
    (bundle,) = tel.bundles()

With ``events_as="logs"`` the API sends its context events as log records (captured too);
:meth:`CapturedTelemetry.views` puts them back on their spans, as the processor does, so
``bundles()`` reads the same either way.

Internal errors of the API raise while a ``CapturedTelemetry`` exists (``strict=True``), so
tests see them instead of a log line.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator

from ._api import AgentContext, _Ids
from ._failsafe import set_strict
from ._table import EVENTS
from .rebuild import EventView, SpanView, rebuild, view_from_readable_span

__all__ = ["CapturedTelemetry", "SequentialIdGenerator", "SequentialIds", "with_log_events"]


class SequentialIdGenerator(IdGenerator):
    """Trace and span ids 1, 2, 3, ... so tests can name them."""

    def __init__(self) -> None:
        self._spans = itertools.count(1)
        self._traces = itertools.count(1)

    def generate_span_id(self) -> int:
        return next(self._spans)

    def generate_trace_id(self) -> int:
        return next(self._traces)


class SequentialIds(_Ids):
    """Record ids ``<prefix>_1``, ``<prefix>_2``, ... per prefix."""

    def __init__(self) -> None:
        super().__init__()
        self._counters: dict[str, itertools.count[int]] = {}

    def new(self, prefix: str) -> str:
        counter = self._counters.setdefault(prefix, itertools.count(1))
        return f"{prefix}_{next(counter)}"


class CapturedTelemetry:
    """An SDK tracer, meter and logger provider that keep everything in memory."""

    def __init__(self, *, capture_content: bool = False, span_limits: SpanLimits | None = None,
                 deterministic_ids: bool = True, strict: bool = True,
                 blocked_sensitivities: Iterable[str] | None = None,
                 resource: Resource | None = None, events_as: str | None = None) -> None:
        self.span_exporter = InMemorySpanExporter()
        resource = resource or Resource.create({"service.name": "otel-agent-context-test"})
        self.tracer_provider = TracerProvider(
            resource=resource, span_limits=span_limits,
            id_generator=SequentialIdGenerator() if deterministic_ids else None)
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.span_exporter))
        self.metric_reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(resource=resource,
                                            metric_readers=[self.metric_reader])
        self.log_exporter = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider(resource=resource)
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.log_exporter))
        self.agent_context = AgentContext(tracer_provider=self.tracer_provider,
                                          meter_provider=self.meter_provider,
                                          logger_provider=self.logger_provider,
                                          capture_content=capture_content,
                                          blocked_sensitivities=blocked_sensitivities,
                                          events_as=events_as)
        if deterministic_ids:
            self.agent_context._ids = SequentialIds()
        set_strict(strict)

    @property
    def tracer(self) -> Any:
        return self.tracer_provider.get_tracer("otel_agent_context.testing")

    def spans(self) -> list[ReadableSpan]:
        """Finished spans, in the order they ended."""
        return list(self.span_exporter.get_finished_spans())

    def views(self) -> list[SpanView]:
        """The spans as views, with the captured log-based context events on their spans."""
        return with_log_events([view_from_readable_span(s) for s in self.spans()], self.logs())

    def bundles(self) -> list[dict[str, Any]]:
        """The rebuilt bundle of every envelope captured so far."""
        return rebuild(self.views())

    def metrics(self) -> dict[str, list[tuple[dict[str, Any], Any]]]:
        """Metric name -> [(attributes, value)]; value is the sum, or the histogram point."""
        out: dict[str, list[tuple[dict[str, Any], Any]]] = {}
        data = self.metric_reader.get_metrics_data()
        if data is None:
            return out
        for rm in data.resource_metrics:
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        value = getattr(point, "value", point)
                        labels = dict(point.attributes or {})
                        out.setdefault(metric.name, []).append((labels, value))
        return out

    def logs(self) -> list[Any]:
        return list(self.log_exporter.get_finished_logs())

    def clear(self) -> None:
        self.span_exporter.clear()
        self.log_exporter.clear()

    def shutdown(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()
        self.logger_provider.shutdown()
        set_strict(False)


def _time(event: EventView) -> int:
    return event.time_unix_nano


def with_log_events(views: list[SpanView], logs: Iterable[Any]) -> list[SpanView]:
    """``views`` with the context events among ``logs`` (SDK log records with a contract
    ``event_name`` and a span) put on their spans in time order, as the processor does."""
    by_id = {(v.trace_id, v.span_id): v for v in views}
    for log in logs:
        record = getattr(log, "log_record", log)
        if record.event_name not in EVENTS or not record.span_id:
            continue
        view = by_id.get((format(record.trace_id, "032x"), format(record.span_id, "016x")))
        if view is None:
            continue
        events = view.events if isinstance(view.events, list) else list(view.events)
        time = record.timestamp or record.observed_timestamp or view.start_time_unix_nano
        bisect.insort(events, EventView(record.event_name, time, dict(record.attributes or {})),
                      key=_time)
        view.events = events
    return views
