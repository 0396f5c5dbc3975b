"""Adapters for the seeds' runtimes: Context Runtime ABI session folders and ContextOS."""
