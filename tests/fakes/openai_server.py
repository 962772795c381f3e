"""A canned vLLM-shaped chat server for the recording proxy's tests and its benchmark.

Its "chat template" is a toy one with vLLM's essential property: rendering a conversation
that ends with an assistant reply gives exactly the previous prompt plus the sampled
tokens, so calls of a well-behaved agent prefix-merge into one chain. A message renders as
[BOS, role] + one token per character + [EOS]; a prompt ends with [BOS, assistant].
Every request is kept (`requests`), so tests can see what the proxy forwarded.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOS, EOS = 1, 2
ROLES = {"system": 10, "user": 11, "assistant": 12, "tool": 13}


def render(messages: list[dict[str, Any]]) -> list[int]:
    ids: list[int] = []
    for message in messages:
        ids += [BOS, ROLES.get(str(message.get("role")), 14)]
        ids += [ord(ch) for ch in str(message.get("content") or "")]
        ids.append(EOS)
    return ids + [BOS, ROLES["assistant"]]


def sampled(text: str) -> tuple[list[int], list[float]]:
    ids = [ord(ch) for ch in text] + [EOS]
    return ids, [-0.05 * (i % 7) for i in range(len(ids))]


class FakeUpstream:
    """`reply(n, body)` gives the n-th reply's text (n from 1); `delay_s` simulates model time;
    `break_stream_after` and `hold_stream_after` cut or pause a stream after that many events."""

    def __init__(
        self,
        *,
        model: str = "fake-model",
        reply: Any = None,
        delay_s: float = 0.0,
        break_stream_after: int | None = None,
        hold_stream_after: int | None = None,
        keep_requests: bool = True,
    ) -> None:
        self.model = model
        self.reply = reply or (lambda n, body: f"reply {n}")
        self.delay_s = delay_s
        self.break_stream_after = break_stream_after
        # A stream can pause after n events until `release` is set; `holding` says it has.
        self.hold_stream_after = hold_stream_after
        self.holding = threading.Event()
        self.release = threading.Event()
        self.hold_expired = False  # nobody released the stream within 5 s
        self.keep_requests = keep_requests
        self.requests: list[dict[str, Any]] = []
        self.calls = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def __enter__(self) -> FakeUpstream:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def completion(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.calls += 1
            n = self.calls
        text = self.reply(n, body)
        ids, logprobs = sampled(text)
        prompt = render(body["messages"])
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
        if body.get("logprobs"):
            choice["logprobs"] = {
                "content": [
                    {"token": chr(t) if t > 31 else f"<{t}>", "logprob": lp, "top_logprobs": []}
                    for t, lp in zip(ids, logprobs, strict=True)
                ]
            }
        # vLLM's shape: the token fields are there either way, null unless asked for.
        choice["token_ids"] = ids if body.get("return_token_ids") else None
        response: dict[str, Any] = {
            "id": f"chatcmpl-{n}",
            "object": "chat.completion",
            "created": 1700000000,
            "model": body.get("model") or self.model,
            "choices": [choice],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": len(ids),
                "total_tokens": len(prompt) + len(ids),
            },
        }
        response["prompt_token_ids"] = prompt if body.get("return_token_ids") else None
        return response

    def stream_chunks(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        """The response as vLLM streams it: a role chunk, one chunk per token, a finish."""
        choice = response["choices"][0]
        head = {k: response[k] for k in ("id", "created", "model")}
        head["object"] = "chat.completion.chunk"
        first: dict[str, Any] = {
            **head,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
        }
        first["prompt_token_ids"] = response["prompt_token_ids"]
        chunks = [first]
        items = (choice.get("logprobs") or {}).get("content") or []
        ids = sampled(choice["message"]["content"])[0]
        text = choice["message"]["content"]
        for i, token in enumerate(ids):
            part: dict[str, Any] = {
                "index": 0,
                "delta": {"content": text[i] if i < len(text) else ""},
                "logprobs": {"content": [items[i]]} if items else None,
                "finish_reason": "stop" if i == len(ids) - 1 else None,
            }
            part["token_ids"] = [token] if choice["token_ids"] is not None else None
            chunks.append({**head, "choices": [part]})
        return chunks

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # or each reply waits out a delayed ACK

            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, status: int, payload: Any) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                if fake.keep_requests:
                    fake.requests.append({"path": self.path, "headers": dict(self.headers)})
                self._send(200, {"object": "list", "data": [{"id": fake.model, "object": "model"}]})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if fake.keep_requests:
                    fake.requests.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                if body.get("max_tokens") == -1:
                    self._send(400, {"error": {"message": "max_tokens must be positive"}})
                    return
                response = fake.completion(body)
                if body.get("stream"):
                    self._stream(fake.stream_chunks(response))
                else:
                    self._send(200, response)

            def _stream(self, chunks: list[dict[str, Any]]) -> None:
                # As vLLM (uvicorn) streams: chunked transfer encoding on a connection
                # that stays open for the next call. A broken stream closes the connection
                # without the last, empty chunk.
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream; charset=utf-8")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                events = [b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks]
                for n, event in enumerate([*events, b"data: [DONE]\n\n"]):
                    if fake.break_stream_after is not None and n >= fake.break_stream_after:
                        self.wfile.flush()
                        self.close_connection = True
                        return
                    if n == fake.hold_stream_after:
                        self.wfile.flush()
                        fake.holding.set()
                        fake.hold_expired = not fake.release.wait(5)
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return Handler
