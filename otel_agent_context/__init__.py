"""otel-agent-context: the Agent Context lifecycle as OpenTelemetry telemetry."""

from ._version import __version__

__all__ = ["__version__"]
