"""docs/processor.md lists every setting and every self-metric the processor has."""

from __future__ import annotations

from processor_testkit import REPO

from otel_agent_context.processor import SETTINGS
from otel_agent_context.processor._metrics import SELF_METRICS

DOC = (REPO / "docs" / "processor.md").read_text(encoding="utf-8")


def test_every_setting_and_flag_is_documented() -> None:
    for setting in SETTINGS:
        assert f"| `{setting.key}` |" in DOC, setting.key
        if setting.flag:
            assert f"`{setting.flag}`" in DOC, setting.flag


def test_every_self_metric_is_documented_with_a_healthy_value() -> None:
    rows = {line.split("|")[1].strip().strip("`"): line for line in DOC.splitlines()
            if line.startswith("| `context_processor_")}
    assert set(rows) == {m.name for m in SELF_METRICS}
    for metric in SELF_METRICS:
        cells = [c.strip() for c in rows[metric.name].split("|")[1:-1]]
        assert cells[1] == metric.kind and cells[4], metric.name
