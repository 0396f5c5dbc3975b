"""The collector-side context processor (``otel-agent-context serve``)."""
