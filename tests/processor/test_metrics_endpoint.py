"""``/metrics``, ``/healthz``, ``/readyz``: contract names and labels, exemplars, health."""

from __future__ import annotations

import urllib.error
import urllib.request

import grpc
from opentelemetry.proto.collector.trace.v1.trace_service_pb2_grpc import TraceServiceStub
from processor_testkit import request, wait_for
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from otel_agent_context import _semconv as S
from otel_agent_context._demo_agent import run_demo
from otel_agent_context.processor._metrics import SELF_METRICS


def _get(processor, path: str, accept: str | None = None) -> tuple[int, str, str]:
    req = urllib.request.Request(f"http://{processor.addresses['metrics']}{path}",
                                 headers={"Accept": accept} if accept else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.headers["Content-Type"], error.read().decode()


def _feed_demo(processor, turns: int = 9) -> None:
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(
        endpoint=processor.addresses["otlp_grpc"], insecure=True), schedule_delay_millis=50))
    run_demo(provider, turns=turns, seed=5)
    provider.shutdown()
    wait_for(lambda: processor.metrics.self.get("context_processor_bundles_written_total",
                                                ("jsonl",)) == turns, message="bundles")

    def envelopes_counted() -> float:
        # metrics are derived after every sink (the store too) took the batch
        families = {f.name: f for f in parse_text(_get(processor, "/metrics")[2])}
        family = families.get("context_envelopes")
        return sum(s.value for s in family.samples if s.name == "context_envelopes_total") \
            if family else 0

    wait_for(lambda: envelopes_counted() == turns, message="the envelopes in the metrics")


def test_contract_metrics_with_exact_names_and_labels(start_processor) -> None:
    processor = start_processor()
    _feed_demo(processor)
    status, content_type, text = _get(processor, "/metrics")
    assert status == 200 and content_type.startswith("text/plain")
    families = {f.name: f for f in parse_text(text)}
    for otel_name, prom_name in S.PROMETHEUS_NAMES.items():
        base = prom_name.removesuffix("_total")
        family = families[base]
        kind = "histogram" if prom_name.endswith("_ratio") else "counter"
        assert family.type == kind, prom_name
        for sample in family.samples:
            labels = set(sample.labels) - {"le"}
            assert labels == set(S.METRIC_LABELS[otel_name]), (prom_name, sample.labels)
    assert "_created" not in text
    envelopes = [s for s in families["context_envelopes"].samples
                 if s.name == "context_envelopes_total"]
    assert sum(s.value for s in envelopes) == 9
    for metric in SELF_METRICS:
        assert metric.name.removesuffix("_total") in families, metric.name
    (info,) = families["context_processor_info"].samples
    assert info.labels["protobuf_backend"] == "upb"


def test_openmetrics_exposition_carries_trace_id_exemplars(start_processor) -> None:
    processor = start_processor()
    _feed_demo(processor, turns=3)
    status, content_type, text = _get(processor, "/metrics", "application/openmetrics-text")
    assert status == 200 and content_type.startswith("application/openmetrics-text")
    assert text.rstrip().endswith("# EOF")
    families = {f.name: f for f in parse_om(text)}
    buckets = [s for s in families["context_budget_utilization_ratio"].samples
               if s.name.endswith("_bucket")]
    exemplars = [s.exemplar for s in buckets if s.exemplar is not None]
    assert exemplars
    assert all(len(e.labels["trace_id"]) == 32 for e in exemplars)


def test_health_and_readiness(start_processor) -> None:
    processor = start_processor()
    assert _get(processor, "/healthz")[0] == 200
    status, _, body = _get(processor, "/readyz")
    assert status == 200 and '"ready":true' in body
    assert _get(processor, "/nope")[0] == 404


def test_request_outcomes_are_counted(start_processor) -> None:
    processor = start_processor()
    stub = TraceServiceStub(grpc.insecure_channel(processor.addresses["otlp_grpc"]))
    stub.Export(request([]), timeout=10)
    _, _, text = _get(processor, "/metrics")
    families = {f.name: f for f in parse_text(text)}
    samples = {tuple(sorted(s.labels.items())): s.value
               for s in families["context_processor_requests"].samples
               if s.name.endswith("_total")}
    assert samples[(("outcome", "ok"), ("transport", "grpc"))] == 1
