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

from ._config import SETTINGS, ProcessorConfig, load_config
from ._server import Processor

__all__ = ["SETTINGS", "Processor", "ProcessorConfig", "load_config"]
