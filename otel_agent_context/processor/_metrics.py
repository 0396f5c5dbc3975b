"""The processor's metrics: contract section 3 derived from bundles, and its own health.

Hot-path updates are plain dict arithmetic under one lock (a bundle yields a few dozen
measurements); ``prometheus_client`` only renders, through custom collectors, in the
Prometheus text format or in OpenMetrics (with trace-id exemplars on the histograms) when
the scraper asks for it. No ``_created`` series: every family is built here.

Every ``context_processor_*`` self-metric is declared in :data:`SELF_METRICS` with the
sentence docs/processor.md shows operators.
"""

from __future__ import annotations

import bisect
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import choose_encoder
from prometheus_client.registry import CollectorRegistry
from prometheus_client.samples import Exemplar

from .. import _semconv as S
from .._measure import HISTOGRAMS, Measurement
from .._table import METRICS
from ._config import DEFAULT_LABEL_VALUES, Target

#: A label value longer than this is cut to its start and a digest of the whole (still one
#: value per distinct input): a value is copied into every series, every scrape and the
#: OTLP push, so one megabyte agent name would make each scrape megabytes long.
MAX_LABEL_LENGTH = 128

__all__ = [
    "BUCKETS",
    "SELF_METRICS",
    "ContractMetrics",
    "MetricsRegistry",
    "OtlpMetricsPush",
    "SelfMetric",
    "SelfMetrics",
]

log = logging.getLogger(__name__)

#: Bucket upper bounds of the contract's histograms: the table's, as the agent-side
#: instruments use them.
BUCKETS: dict[str, tuple[float, ...]] = {
    name: spec.buckets for name, spec in METRICS.items() if spec.buckets is not None}
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
                    10.0, 30.0, 60.0)

_HELP = {name: spec.description for name, spec in METRICS.items()}


class _Histogram:
    __slots__ = ("bounds", "counts", "exemplars", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        #: (trace id, value, time) of each bucket's last observation with a trace id (made
        #: an Exemplar when scraped, not at every observation)
        self.exemplars: list[tuple[str, float, float] | None] = [None] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, trace_id: str | None) -> bool:
        """Count ``value``; False (nothing counted) when the sum would stop being finite
        (two finite ratios near 1.7e308 once made it +Inf for the life of the process)."""
        total = self.sum + value
        if total - total != 0.0:  # inf or nan
            return False
        index = bisect.bisect_left(self.bounds, value)
        self.counts[index] += 1
        self.sum = total
        if trace_id:
            self.exemplars[index] = (trace_id, value, time.time())
        return True

    def observe_run(self, run: Sequence[Measurement], kept: list[Measurement]) -> None:
        """:meth:`observe` each measurement of ``run`` in order, the ones counted appended
        to ``kept``; one clock read for their exemplars."""
        total = self.sum
        bounds, counts, exemplars = self.bounds, self.counts, self.exemplars
        now = None
        for m in run:
            value = m[2]  # by index: a field read by name is a descriptor call
            after = total + value
            if after - after != 0.0:  # inf or nan: as observe
                continue
            total = after
            index = bisect.bisect_left(bounds, value)
            counts[index] += 1
            trace_id = m[3]
            if trace_id:
                if now is None:
                    now = time.time()
                exemplars[index] = (trace_id, value, now)
            kept.append(m)
        self.sum = total

    def buckets(self) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        total = 0
        for index, bound in enumerate((*self.bounds, float("inf"))):
            total += self.counts[index]
            le = "+Inf" if bound == float("inf") else repr(float(bound))
            last = self.exemplars[index]
            out.append((le, total, Exemplar({"trace_id": last[0]}, last[1], last[2]))
                       if last is not None else (le, total))
        return out


class ContractMetrics:
    """Aggregates :class:`~otel_agent_context._measure.Measurement` for exposition."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple[str, ...], float]] = {
            name: {} for name in S.PROMETHEUS_NAMES if name not in HISTOGRAMS
        }
        self._histograms: dict[str, dict[tuple[str, ...], _Histogram]] = {
            name: {} for name in HISTOGRAMS
        }

    def record(self, measurements: Iterable[Measurement]) -> list[Measurement]:
        """Add the measurements; the ones added (left out: a value that is not finite, NaN
        or an infinity, or that would make a counter or a histogram's sum infinite)."""
        return self.record_runs((m.name, m.labels, [m]) for m in measurements)

    def record_runs(self, runs: Iterable[tuple[str, tuple[str, ...], Sequence[Measurement]]]
                    ) -> list[Measurement]:
        """:meth:`record` of measurements given as runs sharing a name and labels (see
        :func:`runs`): one series lookup a run, in the order given."""
        kept: list[Measurement] = []
        with self._lock:
            for name, labels, run in runs:
                series = self._histograms.get(name)
                if series is None:
                    counters = self._counters[name]
                    total = counters.get(labels, 0.0)
                    before = len(kept)
                    for m in run:
                        after = total + m[2]  # m.value
                        if after - after == 0.0:  # neither inf nor nan
                            total = after
                            kept.append(m)
                    if len(kept) > before:
                        counters[labels] = total
                else:
                    histogram = series.get(labels)
                    if histogram is None:
                        histogram = series[labels] = _Histogram(BUCKETS[name])
                    histogram.observe_run(run, kept)
        return kept

    def value(self, name: str, labels: tuple[str, ...]) -> float:
        """A counter's value (tests and the demo's summary)."""
        with self._lock:
            return self._counters[name].get(labels, 0.0)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            for name, series in self._counters.items():
                family = CounterMetricFamily(S.PROMETHEUS_NAMES[name], _HELP[name],
                                             labels=S.METRIC_LABELS[name])
                for labels, value in series.items():
                    family.add_metric(labels, value)
                yield family
            for name, hseries in self._histograms.items():
                hfamily = HistogramMetricFamily(S.PROMETHEUS_NAMES[name], _HELP[name],
                                                labels=S.METRIC_LABELS[name])
                for labels, histogram in hseries.items():
                    hfamily.add_metric(labels, histogram.buckets(), histogram.sum)
                yield hfamily


class SelfMetric(NamedTuple):
    """A ``context_processor_*`` metric: name, type, labels and what a healthy value is."""

    name: str
    kind: str  # counter, gauge, histogram
    labels: tuple[str, ...]
    help: str
    healthy: str


#: Every self-metric, in the order docs/processor.md lists them.
SELF_METRICS: tuple[SelfMetric, ...] = (
    SelfMetric("context_processor_info", "gauge", ("version", "protobuf_backend"),
               "Always 1; the version and protobuf backend as labels.",
               "protobuf_backend=\"upb\" (anything else parses 100x slower)"),
    SelfMetric("context_processor_ready", "gauge", (),
               "1 once the WAL is replayed and the receivers listen; 0 while starting or "
               "stopping.", "1"),
    SelfMetric("context_processor_requests_total", "counter", ("transport", "outcome"),
               "Export requests (traces and logs) by transport (grpc, http) and outcome (ok, "
               "partial, invalid, too_large, unavailable, unauthenticated, unsupported).",
               "mostly outcome=\"ok\"; unavailable only in bursts"),
    SelfMetric("context_processor_spans_received_total", "counter", ("transport",),
               "Spans in decodable export requests.", "follows your traffic"),
    SelfMetric("context_processor_spans_fast_path_total", "counter", (),
               "Spans with no context.*/gen_ai.* attribute: counted and forwarded, not "
               "decoded further.", "the non-agent share of your traffic"),
    SelfMetric("context_processor_spans_accepted_total", "counter", (),
               "Context spans buffered for an envelope.", "follows your agents' traffic"),
    SelfMetric("context_processor_spans_unattributed_total", "counter", (),
               "gen_ai.* spans without context.id (no envelope to put them in).",
               "0 when every model call runs inside an envelope"),
    SelfMetric("context_processor_spans_rejected_total", "counter", ("transport",),
               "Spans refused at the door (OTLP partial success): undecodable, bad ids, "
               "context.* without a usable context.id.", "0"),
    SelfMetric("context_processor_repairs_total", "counter", ("kind",),
               "Values the boundary repaired or dropped alone (type, enum_case, enum_custom, "
               "enum_dropped, non_finite, event_dropped, event_time, span_time, "
               "foreign_trace, duplicate_key, duplicate_span, duplicate_id, text, "
               "array_length, too_deep); each listed in its bundle's rebuild.repairs and told "
               "to the sender (duplicate_id: found by the rebuild, in the bundle only).",
               "0 for emitters that follow the contract"),
    SelfMetric("context_processor_metric_label_overflow_total", "counter", ("metric", "label"),
               "Contract metric label values counted as 'other' because the label already "
               "had metrics.label_values distinct values (per metric and label).",
               "0; a free-form label (agent, trigger) with that many values needs a look"),
    SelfMetric("context_processor_metric_label_truncated_total", "counter", ("metric", "label"),
               f"Contract metric label values longer than {MAX_LABEL_LENGTH} characters, "
               "cut to their start and a digest of the whole value.",
               "0; an agent name or trigger that long is a sender's mistake"),
    SelfMetric("context_processor_measurements_dropped_total", "counter", (),
               "Measurements left out of the contract metrics (and of the OTLP push) "
               "because they are not finite or would make a counter or a histogram's sum "
               "infinite (absurdly large finite values).", "0"),
    SelfMetric("context_processor_wal_write_errors_total", "counter", (),
               "Exports refused because the write-ahead log could not write or sync (a full "
               "disk, an I/O error): answered UNAVAILABLE/503 with a retry delay.", "0"),
    SelfMetric("context_processor_spans_duplicate_total", "counter", (),
               "Spans received again (client retries); dropped, idempotently.",
               "small; grows with export retries"),
    SelfMetric("context_processor_spans_late_total", "counter", (),
               "New spans for an envelope already emitted; raise the envelope timeout.",
               "0"),
    SelfMetric("context_processor_log_records_received_total", "counter", ("transport",),
               "Log records in decodable logs export requests.", "follows your traffic"),
    SelfMetric("context_processor_log_records_ignored_total", "counter", (),
               "Log records that are not context events (no event_name of the contract): "
               "counted and forwarded, not decoded further.",
               "the non-context share of your logs"),
    SelfMetric("context_processor_log_events_total", "counter", ("outcome",),
               "Log-based context events by outcome: accepted (put on their span, or held "
               "until it comes), duplicate (a retry), late (their envelope was already "
               "written), orphaned (held, but their span never came as a context span "
               "within buffer.orphan_timeout, or dropped at buffer.max_events / "
               "max_event_bytes), "
               "rejected (no trace id and span id).",
               "mostly accepted; late, orphaned and rejected 0"),
    SelfMetric("context_processor_partial_envelopes_total", "counter", ("reason",),
               "Envelopes emitted partial, by reason: the processor's (timeout, evicted, "
               "shutdown, missing_events) and the rebuild's (no_envelope_span, missing_spans, "
               "no_span_count, dropped_data, uncounted_items, repaired); one envelope may "
               "count under several.",
               "0, or rare timeouts"),
    SelfMetric("context_processor_bundles_written_total", "counter", ("sink",),
               "Bundles written, by sink (jsonl, otlp_logs, dead_letter).",
               "jsonl equals sum(context_envelopes_total); dead_letter 0"),
    SelfMetric("context_processor_sink_errors_total", "counter", ("sink",),
               "Failed sink writes (each is retried; the receivers push back meanwhile); "
               "dead_letter: dead-letter.jsonl could not be written, its envelopes logged "
               "and not retried.",
               "0"),
    SelfMetric("context_processor_store_left_out_total", "counter", ("reason",),
               "Envelopes left out of the bundle store, each logged (the JSON Lines file "
               "has them): refused (their values, even with NUL characters replaced) or "
               "full (no room in the database even for that envelope alone).", "0"),
    SelfMetric("context_processor_rebuild_errors_total", "counter", (),
               "Envelopes the rebuild raised on; their spans go to dead-letter.jsonl.", "0"),
    SelfMetric("context_processor_wal_replayed_spans_total", "counter", (),
               "Spans read back from the WAL at start.", "0 after a clean stop"),
    SelfMetric("context_processor_traces_in_flight", "gauge", (),
               "Traces with an envelope being assembled.", "well below --max-traces"),
    SelfMetric("context_processor_envelopes_in_flight", "gauge", (),
               "Envelopes being assembled.", "about envelope rate x span export delay"),
    SelfMetric("context_processor_spans_in_flight", "gauge", (),
               "Spans held by envelopes being assembled.", "well below buffer.max_spans"),
    SelfMetric("context_processor_log_events_waiting", "gauge", (),
               "Log-based context events held until their span arrives.",
               "small; about event rate x the time a span is exported after its events"),
    SelfMetric("context_processor_queue_size", "gauge", (),
               "Envelopes rebuilt or finished, waiting for the sinks.", "near 0"),
    SelfMetric("context_processor_queue_capacity", "gauge", (),
               "pipeline.queue_size: beyond it the receivers push back.", "constant"),
    SelfMetric("context_processor_wal_bytes", "gauge", (),
               "Bytes in the write-ahead log.", "small; drops as envelopes are written"),
    SelfMetric("context_processor_wal_segments", "gauge", (),
               "Write-ahead log segment files.", "1 or 2"),
    SelfMetric("context_processor_forward_queue_size", "gauge", (),
               "Requests waiting for the --forward next hop.", "near 0"),
    SelfMetric("context_processor_forward_errors_total", "counter", (),
               "Failed sends to the --forward next hop (retried unless refused for good).",
               "0"),
    SelfMetric("context_processor_forward_dropped_total", "counter", ("reason",),
               "Requests not forwarded, by reason: the status code the next hop refused "
               "them with for good (invalid_argument, unauthenticated, resource_exhausted "
               "without RetryInfo, ...), too_large (one span or log record above its limit), "
               "shutdown (left unsent at stop). Each reason is logged once.", "0"),
    SelfMetric("context_processor_forward_split_total", "counter", (),
               "Requests split in two because the next hop's limit "
               "(forward.max_request_bytes, or its RESOURCE_EXHAUSTED answer) is below them.",
               "0, or steady when senders batch more than the next hop takes"),
    SelfMetric("context_processor_memory_bytes", "gauge", ("part",),
               "Bytes held (estimated), by part of memory.max_bytes: buffer (envelopes being "
               "assembled), queue (finished, waiting for the sinks), events (log-based "
               "events waiting for their span), forward (requests waiting for the next hop), "
               "decode_cache, remembered (keys of written envelopes, for retries).",
               "below context_processor_memory_limit_bytes; buffer + queue near their limit "
               "means the receivers push back"),
    SelfMetric("context_processor_memory_limit_bytes", "gauge", ("part",),
               "Each part's share of memory.max_bytes (--max-memory); they add up to it.",
               "constant"),
    SelfMetric("context_processor_envelope_latency_seconds", "histogram", (),
               "From an envelope's last span received to its bundle written.",
               "p99 under a second for complete envelopes"),
)
_SELF = {m.name: m for m in SELF_METRICS}


class SelfMetrics:
    """Counters the pipeline bumps, gauges read at scrape time, one latency histogram."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[tuple[str, ...], float]] = {
            m.name: {} for m in SELF_METRICS if m.kind == "counter"
        }
        self._gauges: dict[str, Callable[[], Iterable[tuple[tuple[str, ...], float]]]] = {}
        self._latency = _Histogram(_LATENCY_BUCKETS)

    def inc(self, name: str, labels: tuple[str, ...] = (), value: float = 1.0) -> None:
        with self._lock:
            series = self._counters[name]
            series[labels] = series.get(labels, 0.0) + value

    def get(self, name: str, labels: tuple[str, ...] = ()) -> float:
        with self._lock:
            return self._counters[name].get(labels, 0.0)

    def total(self, name: str) -> float:
        with self._lock:
            return sum(self._counters[name].values())

    def gauge(self, name: str, read: Callable[[], float | Iterable[tuple[tuple[str, ...], float]]]
              ) -> None:
        """Register a gauge (or a counter kept elsewhere) read at scrape time."""
        if name not in _SELF:
            raise KeyError(name)

        def series() -> Iterable[tuple[tuple[str, ...], float]]:
            value = read()
            return [((), float(value))] if isinstance(value, (int, float)) else value

        self._gauges[name] = series

    def observe_latencies(self, seconds: Iterable[float]) -> None:
        """Envelope latencies (a written batch's: one lock)."""
        with self._lock:
            observe = self._latency.observe
            for value in seconds:
                observe(value, None)

    def latency_quantile(self, q: float) -> float | None:
        """Upper bucket bound at quantile ``q`` (coarse; for the demo and benchmarks)."""
        with self._lock:
            total = sum(self._latency.counts)
            if not total:
                return None
            running = 0
            for index, count in enumerate(self._latency.counts):
                running += count
                if running >= q * total:
                    bounds = (*self._latency.bounds, float("inf"))
                    return bounds[index]
        return None

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            counters = {name: dict(series) for name, series in self._counters.items()}
            latency = self._latency.buckets(), self._latency.sum
        for metric in SELF_METRICS:
            base = metric.name.removesuffix("_total")
            if metric.kind == "histogram":
                hfamily = HistogramMetricFamily(metric.name, metric.help, labels=metric.labels)
                hfamily.add_metric((), latency[0], latency[1])
                yield hfamily
                continue
            read = self._gauges.get(metric.name)
            series: Iterable[tuple[tuple[str, ...], float]]
            family: CounterMetricFamily | GaugeMetricFamily
            if metric.kind == "counter":
                family = CounterMetricFamily(base, metric.help, labels=metric.labels)
                series = read() if read is not None else counters.get(metric.name, {}).items()
            else:
                family = GaugeMetricFamily(metric.name, metric.help, labels=metric.labels)
                series = read() if read is not None else ()
            for labels, value in series:
                family.add_metric(labels, value)
            yield family


class _Collector:
    def __init__(self, collect: Callable[[], Iterator[Metric]]) -> None:
        self.collect = collect


#: Beyond ``metrics.label_values`` distinct values of a label (per metric and label), a new
#: value is counted as ``other``. Enum labels stay far below (the boundary keeps them to the
#: spec's values); free-form ones (agent, trigger) are what it bounds.
OTHER = "other"


_KEPT = MAX_LABEL_LENGTH - 17  # the start kept: then "~" and 16 hex digits


def _shortened(value: str) -> str:
    digest = hashlib.blake2b(value.encode("utf-8", "surrogatepass"), digest_size=8)
    return f"{value[:_KEPT]}~{digest.hexdigest()}"


#: Label tuples remembered whole per metric (beyond them, each label is looked up alone).
_MAX_KNOWN = 4096


class _LabelLimit:
    """Caps the distinct values of each label of each contract metric."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: dict[tuple[str, int], set[str]] = {}
        #: metric -> label tuples taken whole before (every value of them is in ``_seen``):
        #: one lookup instead of one per label, for the tuples that recur
        self._known: dict[str, set[tuple[str, ...]]] = {}
        self._lock = threading.Lock()

    def apply(self, runs: Iterable[Run]
              ) -> tuple[list[Run], dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """The runs (see :func:`runs`) with over-long values shortened and over-limit values
        as ``other``; (metric, label) -> how many measurements had a value replaced, and
        how many shortened. A run's labels are looked at once."""
        out: list[Run] = []
        overflow: dict[tuple[str, str], int] = {}
        shortened: dict[tuple[str, str], int] = {}
        with self._lock:
            known = self._known
            for name, labels, run in runs:
                if labels in known.get(name, ()):  # only tuples of short values are known
                    out.append((name, labels, run))
                    continue
                given = labels
                if any(len(value) > MAX_LABEL_LENGTH for value in labels):
                    cut = list(labels)
                    for index, value in enumerate(labels):
                        if len(value) > MAX_LABEL_LENGTH:
                            cut[index] = _shortened(value)
                            key = (S.PROMETHEUS_NAMES.get(name, name),
                                   S.METRIC_LABELS[name][index])
                            shortened[key] = shortened.get(key, 0) + len(run)
                    labels = tuple(cut)
                capped: list[str] | None = None
                for index, value in enumerate(labels):
                    seen = self._seen.get((name, index))
                    if seen is None:
                        seen = self._seen[(name, index)] = set()
                    if value in seen:
                        continue
                    if len(seen) < self.limit:
                        seen.add(value)
                        continue
                    if capped is None:
                        capped = list(labels)
                    capped[index] = OTHER
                    key = (S.PROMETHEUS_NAMES.get(name, name), S.METRIC_LABELS[name][index])
                    overflow[key] = overflow.get(key, 0) + len(run)
                if capped is None:
                    whole = known.setdefault(name, set())
                    if len(whole) < _MAX_KNOWN:
                        whole.add(labels)
                else:
                    labels = tuple(capped)
                if labels is not given:
                    run = [m._replace(labels=labels) for m in run]
                out.append((name, labels, run))
        return out, overflow, shortened


#: Measurements that follow each other with the same name and labels: (name, labels, them)
Run = tuple[str, tuple[str, ...], Sequence[Measurement]]


def runs(measurements: Iterable[Measurement]) -> list[Run]:
    """``measurements`` as runs of the same name and labels, in order (an envelope's
    budgets give one run): the label limit and the series lookup are done once a run."""
    out: list[Run] = []
    run: list[Measurement] = []
    name = labels = None
    for m in measurements:  # a loop, not groupby: no key tuple nor group object a run
        if m[0] == name and m[1] == labels:
            run.append(m)
        else:
            name, labels, run = m[0], m[1], [m]
            out.append((name, labels, run))
    return out


class MetricsRegistry:
    """Both metric sets behind one ``prometheus_client`` registry."""

    def __init__(self, label_values: int = DEFAULT_LABEL_VALUES) -> None:
        self.labels = _LabelLimit(label_values)
        self.contract = ContractMetrics()
        self.self = SelfMetrics()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(_Collector(self.contract.collect))  # type: ignore[arg-type]
        self.registry.register(_Collector(self.self.collect))  # type: ignore[arg-type]
        self.push: OtlpMetricsPush | None = None

    def record(self, measurements: Sequence[Measurement]) -> None:
        """Count the measurements (of one envelope, or of a batch of them in order)."""
        limited, overflow, shortened = self.labels.apply(runs(measurements))
        for (metric, label), count in overflow.items():
            self.self.inc("context_processor_metric_label_overflow_total", (metric, label), count)
        for (metric, label), count in shortened.items():
            self.self.inc("context_processor_metric_label_truncated_total", (metric, label),
                          count)
        kept = self.contract.record_runs(limited)
        if len(kept) < len(measurements):
            self.self.inc("context_processor_measurements_dropped_total", (),
                          len(measurements) - len(kept))
        if self.push is not None:  # the same values as /metrics: none that is not finite
            self.push.record(kept)

    def render(self, accept: str | None) -> tuple[bytes, str]:
        """The exposition the ``Accept`` header asks for: (body, content type)."""
        encoder, content_type = choose_encoder(accept or "")
        return encoder(self.registry), content_type


class OtlpMetricsPush:
    """The contract metrics, pushed over OTLP/gRPC by the OpenTelemetry SDK.

    Names are the OpenTelemetry ones (``context.envelopes``); a Collector's Prometheus
    exporter turns them into the same exposition names (histograms have unit ``1``, hence
    the ``_ratio`` suffix).
    """

    def __init__(self, target: Target, *, interval: float) -> None:
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource

        exporter = OTLPMetricExporter(endpoint=str(target), insecure=not target.secure)
        self._reader = PeriodicExportingMetricReader(
            exporter, export_interval_millis=int(interval * 1000)
        )
        self._provider = MeterProvider(
            metric_readers=[self._reader],
            resource=Resource.create({"service.name": "otel-agent-context-processor"}),
        )
        meter = self._provider.get_meter("otel_agent_context.processor")
        self._instruments: dict[str, Any] = {}
        for name in S.PROMETHEUS_NAMES:
            if name in HISTOGRAMS:
                self._instruments[name] = meter.create_histogram(
                    name, unit="1", description=_HELP[name],
                    explicit_bucket_boundaries_advisory=list(BUCKETS[name]),
                )
            else:
                self._instruments[name] = meter.create_counter(name, description=_HELP[name])

    def record(self, measurements: Sequence[Measurement]) -> None:
        for m in measurements:
            attributes = dict(zip(S.METRIC_LABELS[m.name], m.labels, strict=True))
            instrument = self._instruments[m.name]
            if m.name in HISTOGRAMS:
                instrument.record(m.value, attributes)
            else:
                instrument.add(m.value, attributes)

    def shutdown(self) -> None:
        try:
            self._provider.shutdown(timeout_millis=5_000)
        except Exception:  # noqa: BLE001 - a push failing at exit must not stop the exit
            log.warning("OTLP metric push: shutdown failed", exc_info=True)
