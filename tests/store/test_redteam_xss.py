"""Red team: every string of a bundle replaced by markup, then every page that shows it
(index, session, envelope, the 404s) checked for the markup unescaped, and for the page's
script-free policy."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from otel_agent_context._store import open_store
from otel_agent_context.processor._config import Endpoint
from otel_agent_context.processor._ui import UiServer

MARK = "\"'><script>alert(1)</script><img src=x onerror=alert(2)>{{7*7}}"


def _poison(value: Any, path: str = "") -> Any:
    """Every string (keys too, but the bundle's own record names) made hostile; numbers kept."""
    if isinstance(value, str):
        return value + MARK
    if isinstance(value, dict):
        return {k: _poison(v, f"{path}.{k}") for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v, path) for v in value]
    return value


def test_markup_in_every_field_is_shown_escaped(demo_out: Path, demo_bundles: list,
                                                tmp_path: Path) -> None:
    shutil.copy(demo_out / "context.db", tmp_path / "context.db")
    hostile = [_poison(b) for b in demo_bundles]
    # tokens by kind keys and omission reasons shown in the page come from these strings too
    with open_store(str(tmp_path / "context.db")) as store:
        store.write(hostile)
        server = UiServer(store, Endpoint("127.0.0.1", 0),
                          trace_url_template="http://jaeger.example/trace/{trace_id}")
        base = f"http://127.0.0.1:{server.start()}"
        try:
            bundle = hostile[0]
            conversation = bundle["context_envelope"]["metadata"]["gen_ai.conversation.id"]
            paths = ["/", "/?agent=" + quote(MARK), "/?reason=" + quote(MARK),
                     "/sessions/" + quote(conversation, safe=""),
                     "/sessions/" + quote(MARK, safe=""), "/envelopes/" + quote(MARK, safe=""),
                     "/" + quote(MARK, safe="")]
            paths += ["/envelopes/" + quote(b["context_envelope"]["context_id"], safe="")
                      for b in hostile]
            for path in paths:
                response = httpx.get(base + path)
                assert response.status_code in (200, 404), (path, response.status_code)
                text = response.text
                assert "<script>" not in text and "<img src=x" not in text, path
                assert "onerror=alert(2)>" not in text, path
                policy = response.headers["content-security-policy"]
                assert "default-src 'none'" in policy and "script-src" not in policy
            session = httpx.get(base + paths[3])
            assert session.status_code == 200 and "&lt;script&gt;" in session.text
        finally:
            server.stop()
