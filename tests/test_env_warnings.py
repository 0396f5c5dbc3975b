"""A setting's value that is not one of its own is said once a process, however many
instrumentors and AgentContexts read it, and the application goes on."""

from __future__ import annotations

import subprocess
import sys

import pytest

_APP = """
import logging
logging.basicConfig(level=logging.WARNING, format="%(message)s")
from otel_agent_context import AgentContext
from otel_agent_context.instrumentation import instrument, uninstrument
for _ in range(3):
    AgentContext()
instrument()
uninstrument()
print("done")
"""


@pytest.mark.parametrize(("name", "value", "said"), [
    ("OTEL_AGENT_CONTEXT_EVENTS", "bogus", "is not one of span_events, logs"),
    ("OTEL_AGENT_CONTEXT_STAGE_SPANS", "maybe", "is not true or false"),
    ("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "true",
     "reads it as NO_CONTENT"),
])
def test_a_settings_odd_value_is_said_once(name: str, value: str, said: str) -> None:
    run = subprocess.run([sys.executable, "-c", _APP], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", name: value}, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == "done\n"
    lines = [line for line in run.stderr.splitlines() if said in line]
    assert len(lines) == 1, run.stderr
    assert f"{name}={value!r}" in lines[0]
