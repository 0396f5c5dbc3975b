"""A tiny loopback stand-in for OpenAI's chat completions endpoint (non-streaming only), so
``langchain-openai``'s ``ChatOpenAI`` can run offline in the LangChain tests."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ANSWER = "Refunds are issued within 14 days."


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        self.server.requests.append(body)  # type: ignore[attr-defined]
        if not self.path.endswith("/chat/completions"):
            self.send_error(404)
            return
        reply = json.dumps({
            "id": f"chatcmpl-{len(self.server.requests)}",  # type: ignore[attr-defined]
            "object": "chat.completion", "created": 1_800_000_000, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": ANSWER}}],
            "usage": {"prompt_tokens": 42, "completion_tokens": 9, "total_tokens": 51},
        }).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


class OpenAIStub:
    """``with OpenAIStub() as stub: ChatOpenAI(base_url=stub.url, ...)``"""

    def __enter__(self) -> OpenAIStub:
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.requests = []  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/v1"
        return self

    @property
    def requests(self) -> list[dict[str, Any]]:
        return self._server.requests  # type: ignore[attr-defined,no-any-return]

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
