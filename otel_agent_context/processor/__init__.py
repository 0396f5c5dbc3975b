"""The collector-side context processor (``otel-agent-context serve``).

OTLP traces in (gRPC and HTTP); Agent Context bundles (JSON Lines, OTLP logs) and the
contract's metrics out. Run it in-process for tests and demos::

    from otel_agent_context.processor import Processor, ProcessorConfig

    config = ProcessorConfig.from_values({"receivers.otlp_grpc.endpoint": "127.0.0.1:0",
                                          "output.dir": "bundles"})
    with Processor(config) as processor:
        print(processor.addresses["otlp_grpc"])

Operations (settings, self-metrics, durability, backpressure): docs/processor.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ._config import SETTINGS, ProcessorConfig, load_config

if TYPE_CHECKING:
    from ._server import Processor

__all__ = ["SETTINGS", "Processor", "ProcessorConfig", "load_config"]


def __getattr__(name: str) -> Any:
    # Processor pulls in grpc and the HTTP servers: loaded on first use, so that
    # ``otel-agent-context --help`` and the other commands start quickly.
    if name == "Processor":
        from ._server import Processor

        return Processor
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
