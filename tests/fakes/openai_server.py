"""A fake OpenAI-compatible server on 127.0.0.1 that answers in vLLM's shape.

One server stands in for vLLM wherever a test needs one: the recording proxy's upstream
(and its benchmark), the model behind scripted rollouts, and the runtime LoRA endpoints
that RL jobs publish adapters to. Every request is kept, headers and body, so a test can
see what reached the server and with which Authorization header.

Its chat template is a toy one with vLLM's essential property: rendering a conversation
that ends with an assistant reply gives exactly the previous prompt plus the sampled
tokens, so calls of a well-behaved agent prefix-merge into one chain. A message renders as
[BOS, role] + one token per character + [EOS]; a prompt ends with [BOS, assistant]. A reply
samples one token per character, then EOS. /tokenize renders with the same template.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

BOS, EOS = 1, 2
ROLES = {"system": 10, "user": 11, "assistant": 12, "tool": 13}
# A held call waits for `release` this long: long enough for a test to kill its client.
CALL_HOLD_S = 120.0
# A paused stream waits this long; `hold_expired` then says nobody released it.
STREAM_HOLD_S = 5.0

Reply = Callable[[int, dict[str, Any]], str]
RerankScore = Callable[[str, str], float]


def render(messages: list[dict[str, Any]], *, generation_prompt: bool = True) -> list[int]:
    ids: list[int] = []
    for message in messages:
        ids += [BOS, ROLES.get(str(message.get("role")), 14)]
        ids += [ord(ch) for ch in str(message.get("content") or "")]
        ids.append(EOS)
    return ids + ([BOS, ROLES["assistant"]] if generation_prompt else [])


def sampled(text: str) -> tuple[list[int], list[float]]:
    """A reply's token ids and logprobs."""
    ids = [ord(ch) for ch in text] + [EOS]
    return ids, _logprobs(ids)


def _logprobs(ids: Sequence[int]) -> list[float]:
    return [-0.05 * (i % 7) for i in range(len(ids))]


def _asked(body: dict[str, Any], field: str) -> bool:
    # Chat requests ask with true; token-in completions ask for logprobs with 0.
    value = body.get(field)
    return value is not None and value is not False


def _header(headers: dict[str, str], name: str) -> str | None:
    return next((v for k, v in headers.items() if k.lower() == name.lower()), None)


class FakeOpenAIServer:
    """Use it as a context manager; `base_url` ends in /v1.

    Replies: `actions` is a script of actions, each sent JSON-encoded as the reply's content,
    the last repeating (a test may swap the script mid-way); otherwise `reply(n, body)` gives
    the n-th reply's text (n from 1), by default "reply n". `token_ids` makes every reply
    sample exactly those ids instead of its characters. Token ids and logprobs come back
    only when the request asks for them (`return_token_ids`, `logprobs`), null otherwise.

    Timing: `delay_s` before every completion; `hold_call` holds the n-th call until `release`
    is set (`held` says it is holding); `hold_stream_after` pauses a stream after that many
    events (`holding`, `hold_expired`); `break_stream_after` cuts it there without its end.

    Models: /v1/models lists `models`, at first just `model`; /v1/load_lora_adapter and
    /v1/unload_lora_adapter add and drop names, kept in `loads` and `unloads`; loading a
    name already served is refused, as vLLM refuses it.

    Refusals: `refuse` maps an endpoint ("chat/completions", "completions", "models",
    "tokenize", "load_lora_adapter", "unload_lora_adapter", "rerank", "score") to the error
    status it answers instead. A chat request with max_tokens -1, or above `max_model_len`,
    gets vLLM's 400.

    Reranking: with `rerank_score(query, document) -> float`, /v1/rerank answers in vLLM's
    Jina/Cohere shape (results[{index, document, relevance_score}], best first, cut to
    top_n) and /v1/score in its score shape (data[{index, score}]); without it both answer
    404, as for a served model that is not a reranker.

    `keep_requests=False` keeps nothing, for the proxy's benchmark. `hosted=True` answers as a
    hosted API does (OpenAI's own): no `token_ids` or `prompt_token_ids` fields at all and
    no /tokenize, for code that must work against any OpenAI-compatible server.
    """

    def __init__(
        self,
        *,
        model: str = "fake-model",
        actions: list[Any] | None = None,
        reply: Reply | None = None,
        token_ids: Sequence[int] | None = None,
        delay_s: float = 0.0,
        hold_call: int | None = None,
        hold_stream_after: int | None = None,
        break_stream_after: int | None = None,
        refuse: dict[str, int] | None = None,
        keep_requests: bool = True,
        max_model_len: int = 8192,
        hosted: bool = False,
        rerank_score: RerankScore | None = None,
    ) -> None:
        self.model = model
        self.max_model_len = max_model_len
        self.models = {model}
        self.actions = actions
        self.reply: Reply = reply or (lambda n, body: f"reply {n}")
        self.token_ids = token_ids
        self.delay_s = delay_s
        self.hold_call = hold_call
        self.hold_stream_after = hold_stream_after
        self.break_stream_after = break_stream_after
        self.refuse = refuse or {}
        self.rerank_score = rerank_score
        self.keep_requests = keep_requests
        self.hosted = hosted
        self.held = threading.Event()
        self.holding = threading.Event()
        self.release = threading.Event()
        self.hold_expired = False
        self.requests: list[dict[str, Any]] = []
        self.loads: list[dict[str, str]] = []
        self.unloads: list[str] = []
        self.calls = 0
        self._lock = threading.Lock()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    @property
    def authorizations(self) -> list[str | None]:
        """Each request's Authorization header, None where it had none."""
        return [_header(r["headers"], "Authorization") for r in self.requests]

    @property
    def tokenize_requests(self) -> list[dict[str, Any]]:
        return [r["body"] for r in self.requests if r["path"] == "/tokenize"]

    def __enter__(self) -> FakeOpenAIServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    # --- answers ---------------------------------------------------------------------------

    def _answer(self, http: BaseHTTPRequestHandler, body: dict[str, Any] | None) -> None:
        """Answer a GET (no body) or a POST."""
        endpoint = http.path.split("?")[0].removeprefix("/v1").lstrip("/")
        if self.keep_requests:
            record = {"path": http.path, "headers": dict(http.headers)}
            self.requests.append(record if body is None else {**record, "body": body})
        if endpoint in self.refuse:
            status = self.refuse[endpoint]
            message = {"message": f"{endpoint} refused", "code": status}
            _send(http, status, {"error": message})
        elif body is None:
            self._get(http, endpoint)
        else:
            self._post(http, endpoint, body)

    def _get(self, http: BaseHTTPRequestHandler, endpoint: str) -> None:
        if endpoint == "models":
            _send(http, 200, self._model_list())
        else:
            _send(http, 404, {"error": {"message": f"no GET {http.path}"}})

    def _post(self, http: BaseHTTPRequestHandler, endpoint: str, body: dict[str, Any]) -> None:
        if endpoint in ("chat/completions", "completions"):
            self._complete(http, body)
        elif endpoint == "tokenize" and not self.hosted:
            generation_prompt = body.get("add_generation_prompt", True)
            if "prompt" in body:  # plain text (a token count): one token per character
                tokens = [ord(ch) for ch in str(body["prompt"])]
            else:
                tokens = render(body["messages"], generation_prompt=generation_prompt)
            _send(http, 200, {"count": len(tokens), "tokens": tokens})
        elif endpoint in ("load_lora_adapter", "unload_lora_adapter"):
            self._adapter(http, endpoint, body)
        elif endpoint in ("rerank", "score") and self.rerank_score is not None:
            _send(http, 200, self._rerank(endpoint, body, self.rerank_score))
        else:
            _send(http, 404, {"error": {"message": f"no POST {http.path}"}})

    def _rerank(self, endpoint: str, body: dict[str, Any], score: RerankScore) -> dict[str, Any]:
        if endpoint == "score":
            query, texts = str(body["text_1"]), list(body["text_2"])
            data = [
                {"index": i, "object": "score", "score": score(query, t)}
                for i, t in enumerate(texts)
            ]
            return {"id": "score-1", "object": "list", "model": body.get("model"), "data": data}
        query, texts = str(body["query"]), list(body["documents"])
        scores = [score(query, t) for t in texts]
        order = sorted(range(len(texts)), key=lambda i: -scores[i])
        results = [
            {"index": i, "document": {"text": texts[i]}, "relevance_score": scores[i]}
            for i in order
        ]
        top_n = body.get("top_n") or len(results)
        return {"id": "rerank-1", "model": body.get("model"), "results": results[:top_n]}

    def _model_list(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {"id": m, "object": "model", "max_model_len": self.max_model_len}
                for m in sorted(self.models)
            ],
        }

    def _adapter(self, http: BaseHTTPRequestHandler, endpoint: str, body: dict[str, Any]) -> None:
        name = body["lora_name"]
        if endpoint == "unload_lora_adapter":
            self.unloads.append(name)
            self.models.discard(name)
        elif name in self.models:
            return _send(http, 400, {"error": f"the adapter {name!r} is already loaded"})
        else:
            self.loads.append(body)
            self.models.add(name)
        _send(http, 200, {})

    def _complete(self, http: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        if self.delay_s:
            time.sleep(self.delay_s)
        if body.get("max_tokens") == -1:
            return _send(http, 400, {"error": {"message": "max_tokens must be positive"}})
        if (body.get("max_tokens") or 0) > self.max_model_len:
            message = (
                f"max_tokens={body['max_tokens']} cannot be greater than "
                f"max_model_len={self.max_model_len}. Please request fewer output tokens."
            )
            return _send(http, 400, {"error": {"message": message, "param": "max_tokens"}})
        with self._lock:
            self.calls += 1
            n = self.calls
        if n == self.hold_call:
            self.held.set()
            self.release.wait(CALL_HOLD_S)
        response = self._completion(n, body)
        if body.get("stream"):
            self._stream(http, self._stream_chunks(response))
        elif self.hosted:
            response.pop("prompt_token_ids")
            response["choices"][0].pop("token_ids")
            _send(http, 200, response)
        else:
            _send(http, 200, response)

    def _reply_text(self, n: int, body: dict[str, Any]) -> str:
        if self.actions is not None:
            return json.dumps(self.actions[min(n - 1, len(self.actions) - 1)])
        return self.reply(n, body)

    def _sampled_ids(self, text: str) -> list[int]:
        return list(self.token_ids) if self.token_ids is not None else sampled(text)[0]

    def _completion(self, n: int, body: dict[str, Any]) -> dict[str, Any]:
        text = self._reply_text(n, body)
        ids = self._sampled_ids(text)
        # A token-in completion's prompt is its token ids; a chat's is the rendered messages.
        prompt = list(body["prompt"]) if "prompt" in body else render(body["messages"])
        choice: dict[str, Any] = {
            "index": 0,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": None,
            "finish_reason": "stop",
            "stop_reason": None,
        }
        if _asked(body, "logprobs"):
            choice["logprobs"] = {
                "content": [
                    {"token": chr(t) if t > 31 else f"<{t}>", "logprob": lp, "top_logprobs": []}
                    for t, lp in zip(ids, _logprobs(ids), strict=True)
                ]
            }
        # vLLM's shape: the token fields are there either way, null unless asked for.
        choice["token_ids"] = ids if _asked(body, "return_token_ids") else None
        return {
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
            "prompt_token_ids": prompt if _asked(body, "return_token_ids") else None,
        }

    def _stream_chunks(self, response: dict[str, Any]) -> list[dict[str, Any]]:
        """The response as vLLM streams it: a role chunk, one chunk per token, a finish."""
        choice = response["choices"][0]
        head = {k: response[k] for k in ("id", "created", "model")}
        head["object"] = "chat.completion.chunk"
        first: dict[str, Any] = {
            **head,
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
            "prompt_token_ids": response["prompt_token_ids"],
        }
        chunks = [first]
        items = (choice.get("logprobs") or {}).get("content") or []
        text = choice["message"]["content"]
        ids = self._sampled_ids(text)
        last = len(ids) - 1
        for i, token in enumerate(ids):
            part: dict[str, Any] = {
                "index": 0,
                # The last token carries whatever text is left, so the pieces join to it.
                "delta": {"content": text[i:] if i == last else text[i : i + 1]},
                "logprobs": {"content": [items[i]]} if items else None,
                "finish_reason": "stop" if i == last else None,
                "token_ids": [token] if choice["token_ids"] is not None else None,
            }
            chunks.append({**head, "choices": [part]})
        return chunks

    def _stream(self, http: BaseHTTPRequestHandler, chunks: list[dict[str, Any]]) -> None:
        # As vLLM (uvicorn) streams: chunked transfer encoding on a connection that stays
        # open for the next call. A broken stream closes the connection without the last,
        # empty chunk.
        http.send_response(200)
        http.send_header("Content-Type", "text/event-stream; charset=utf-8")
        http.send_header("Transfer-Encoding", "chunked")
        http.end_headers()
        events = [b"data: " + json.dumps(chunk).encode() + b"\n\n" for chunk in chunks]
        for n, event in enumerate([*events, b"data: [DONE]\n\n"]):
            if self.break_stream_after is not None and n >= self.break_stream_after:
                http.wfile.flush()
                http.close_connection = True
                return
            if n == self.hold_stream_after:
                # Set before the flush: a client that holds these events may check it.
                self.holding.set()
                http.wfile.flush()
                self.hold_expired = not self.release.wait(STREAM_HOLD_S)
            http.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
        http.wfile.write(b"0\r\n\r\n")
        http.wfile.flush()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 keeps the connection open for the next call, as vLLM (uvicorn) does.
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # or each reply waits out a delayed ACK

            def log_message(self, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                fake._answer(self, None)

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                fake._answer(self, json.loads(self.rfile.read(length) or b"{}"))

        return Handler


def _send(http: BaseHTTPRequestHandler, status: int, payload: Any) -> None:
    body = json.dumps(payload).encode()
    http.send_response(status)
    http.send_header("Content-Type", "application/json")
    http.send_header("Content-Length", str(len(body)))
    http.end_headers()
    http.wfile.write(body)
