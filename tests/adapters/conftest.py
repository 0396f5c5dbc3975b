"""Fixtures of the runtimes adapters' tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from adapters_helpers import copy_session

from otel_agent_context.testing import CapturedTelemetry


@pytest.fixture
def tel() -> Iterator[CapturedTelemetry]:
    captured = CapturedTelemetry()
    try:
        yield captured
    finally:
        captured.shutdown()


@pytest.fixture
def session(tmp_path: Path) -> Path:
    """A copy of the seed session folder, every file dated FILES_AT, the pack PACK_AT."""
    return copy_session(tmp_path)
