"""Fixtures of the processor tests: an in-process processor on free loopback ports."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from processor_testkit import SPAWNED, config

from otel_agent_context.processor import Processor


@pytest.fixture
def start_processor(tmp_path: Path) -> Iterator[Callable[..., Processor]]:
    """``start_processor(**settings)``: a started processor, stopped after the test."""
    started: list[Processor] = []

    def start(*, rebuild: Any = None, sinks: Any = None, **settings: Any) -> Processor:
        processor = Processor(config(tmp_path, **settings), rebuild=rebuild, sinks=sinks)
        started.append(processor.start())
        return processor

    yield start
    for processor in started:
        processor.stop(timeout=10)


@pytest.fixture(autouse=True)
def _no_leftover_serve() -> Iterator[None]:
    """A test that fails half-way must not leave a ``serve`` process running."""
    yield
    while SPAWNED:
        process = SPAWNED.pop()
        if process.poll() is None:
            process.kill()
        process.wait(10)
