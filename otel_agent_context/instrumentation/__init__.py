"""Auto-instrumentors for LLM clients and agent frameworks."""
