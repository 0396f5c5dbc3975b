"""``otel-agent-context stub``: the bundled stub as a command, as a user trying the
instrumentation offline runs it (a real process, the real ``openai``/``anthropic`` clients
pointed at it by the variables it prints)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator

import anthropic
import openai
import pytest
from stub_server import REPLY


def _start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "otel_agent_context", "stub", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.fixture
def served() -> Iterator[tuple[subprocess.Popen[str], dict[str, str]]]:
    proc = _start("--requests")
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        env = {}
        for _ in range(2):
            for pair in proc.stdout.readline().split():
                key, _, value = pair.partition("=")
                env[key] = value
        assert proc.stdout.readline().startswith("serving until interrupted")
        env["url"] = url
        yield proc, env
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def test_the_clients_work_against_the_printed_urls_and_sigterm_stops_it(served) -> None:
    proc, env = served
    chat = openai.OpenAI(base_url=env["OPENAI_BASE_URL"], api_key=env["OPENAI_API_KEY"],
                         max_retries=0)
    reply = chat.chat.completions.create(
        model="gpt-4o-mini", messages=[{"role": "user", "content": "Where is my order?"}])
    assert reply.choices[0].message.content == REPLY
    claude = anthropic.Anthropic(base_url=env["ANTHROPIC_BASE_URL"],
                                 api_key=env["ANTHROPIC_API_KEY"], max_retries=0)
    message = claude.messages.create(
        model="claude-3-haiku-20240307", max_tokens=64,
        messages=[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yes?"},
                  {"role": "user", "content": "Where is my order?"}])
    assert message.content[0].text == REPLY

    # a body that is not a JSON object: a 400 naming why, and the stub keeps serving
    request = urllib.request.Request(env["url"] + "/v1/chat/completions", data=b"[1, 2]",
                                     headers={"content-type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=5)
    assert refused.value.code == 400
    assert "not a JSON object" in json.loads(refused.value.read())["error"]["message"]
    again = chat.chat.completions.create(
        model="gpt-4o", messages=[{"role": "user", "content": "again"}], stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in again if c.choices).strip() == REPLY

    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    assert out.splitlines() == [
        "/v1/chat/completions model='gpt-4o-mini' items=1",
        "/v1/messages model='claude-3-haiku-20240307' items=3",
        "/v1/chat/completions model='gpt-4o' items=1 stream",
    ]
    assert "Traceback" not in err


def test_a_port_in_use_is_refused_with_a_message() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        proc = _start("--port", str(taken.getsockname()[1]))
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2
    assert out == ""
    assert "cannot listen on 127.0.0.1:" in err and "Traceback" not in err
    bad = _start("--port", "70000")
    _, err = bad.communicate(timeout=30)
    assert bad.returncode == 2 and "is not a port" in err
