"""The local OpenAI / Anthropic wire-API stub used by these tests (and by the examples).

It lives in the package (``otel_agent_context.instrumentation._stub``) so the examples and the
benchmark can run offline against it too; this module is the tests' name for it.
"""

from otel_agent_context.instrumentation._stub import REPLY, StubServer, stub_tokens

__all__ = ["REPLY", "StubServer", "stub_tokens"]
