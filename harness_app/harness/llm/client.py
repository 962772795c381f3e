"""A minimal chat-completions client that records every call token by token.

vLLM returns `prompt_token_ids`, each choice's `token_ids` and per-token logprobs when
asked with `return_token_ids`, `logprobs` and `top_logprobs: 0`. Every call yields a
`ModelCallRecord`, including failed ones, so nothing the sampler did is lost. Failures are
classified so the worker can record a termination reason or retry.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

import httpx

from harness_app.harness.llm.upstreams import NoReplicaError, UpstreamPool
from harness_app.harness.types import JSONObject

# Phrases vLLM (and OpenAI) use when the prompt does not fit the context window.
_OVERFLOW_MARKERS = ("maximum context length", "context length", "too long", "max_model_len")


# Token-in rollouts and token counts ask the server's /tokenize, which vLLM has and other
# OpenAI-compatible servers lack or answer differently.
_NOT_VLLM = (
    "/tokenize did not answer with token ids, as vLLM does: token capture (the batch's "
    "capture_tokens) needs a vLLM server; turn it off for other OpenAI-compatible servers"
)


class ModelCallError(Exception):
    """A call that produced no usable completion. `kind` becomes the termination reason."""

    def __init__(self, kind: str, message: str, record: ModelCallRecord | None = None) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.record = record

    @property
    def retryable(self) -> bool:
        return self.kind in {"model_unreachable", "model_server_error", "model_timeout"}


@dataclass
class ModelCallRecord:
    request: dict[str, Any]
    response: dict[str, Any] = field(default_factory=dict)
    prompt_token_ids: list[int] = field(default_factory=list)
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] = field(default_factory=list)
    finish_reason: str = ""
    usage: dict[str, Any] = field(default_factory=dict)
    latency_ms: float = 0.0
    policy_version: str = ""
    error: str = ""
    # The chat messages a token-in prompt (ids only in the request) was rendered from: the
    # whole prompt when `rerendered`, else those added since the previous recorded call of
    # the episode (append mode: the prompt is the concatenation up to this call). Empty for
    # a chat request, which carries its messages. What the viewer shows as the prompt.
    prompt_messages: list[dict[str, Any]] = field(default_factory=list)
    # True when the prompt was rebuilt from scratch (rerender mode) rather than extending
    # the previous call: reconstruction then gives the call its own training sequence.
    rerendered: bool = False

    def to_json(self) -> JSONObject:
        return asdict(self)

    @property
    def message(self) -> dict[str, Any]:
        """The assistant message; a plain completion's text becomes its content."""
        choice = (self.response.get("choices") or [{}])[0]
        if "text" in choice:
            return {"role": "assistant", "content": choice.get("text") or ""}
        return dict(choice.get("message") or {})


@dataclass(frozen=True)
class Sampling:
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 512
    seed: int | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Sampling:
        known = {k: data[k] for k in ("temperature", "top_p", "max_tokens", "seed") if k in data}
        return cls(**known)

    def to_request(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
        }
        if self.seed is not None:
            body["seed"] = self.seed
        return body


class ChatClient:
    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        timeout_s: float = 120.0,
        api_key: str = "EMPTY",
        policy_version: str = "",
        transport: httpx.BaseTransport | None = None,
        capture_tokens: bool = True,
        upstreams: UpstreamPool | None = None,
    ) -> None:
        self.model = model
        self.policy_version = policy_version
        # False for a server that returns no token ids (a hosted API): chat requests do not
        # ask for them, and a reply without them is recorded as a call with no tokens.
        self.capture_tokens = capture_tokens
        # Each call goes to one replica of `upstreams` (upstreams.py); without a pool, to
        # `base_url` alone.
        self.upstreams = upstreams or UpstreamPool([base_url])
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
            headers={"Authorization": f"Bearer {api_key}"},
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def build_request(
        self, messages: list[dict[str, Any]], sampling: Sampling, **extra: Any
    ) -> dict[str, Any]:
        return {
            "model": self.model,
            "messages": messages,
            **sampling.to_request(),
            "logprobs": True,
            "top_logprobs": 0,
            **({"return_token_ids": True} if self.capture_tokens else {}),
            **extra,
        }

    def build_completion_request(
        self, prompt_ids: list[int], sampling: Sampling, **extra: Any
    ) -> dict[str, Any]:
        """A token-in completion request: the prompt is token ids, not text."""
        return {
            "model": self.model,
            "prompt": prompt_ids,
            **sampling.to_request(),
            "logprobs": 0,
            "return_token_ids": True,
            **extra,
        }

    def tokenize_chat(
        self,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        add_generation_prompt: bool = True,
    ) -> list[int]:
        """The token ids of `messages` rendered by the server's own chat template."""
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "add_generation_prompt": add_generation_prompt,
        }
        if tools:
            body["tools"] = tools
        return list(self._tokenize(body)["tokens"])

    def count_tokens(self, text: str) -> int:
        """How many tokens the served model's tokenizer makes of `text` (no special tokens):
        the env's token counter in an LLM rollout."""
        body = {"model": self.model, "prompt": text, "add_special_tokens": False}
        data = self._tokenize(body)
        return int(data["count"]) if "count" in data else len(data["tokens"])

    def _tokenize(self, body: dict[str, Any]) -> dict[str, Any]:
        record = ModelCallRecord(request=body)
        started = time.perf_counter()
        # vLLM serves /tokenize beside /v1, at the server root.
        response = self._post(record, started, "/tokenize", body, at_root=True)
        if response.status_code >= 400:
            raise self._http_error(record, response)
        try:
            data = response.json()
        except ValueError as exc:
            raise self._fail(record, started, "model_bad_response", _NOT_VLLM) from exc
        tokens = data.get("tokens") if isinstance(data, dict) else None
        if not isinstance(tokens, list) or not all(type(t) is int for t in tokens):
            raise self._fail(record, started, "model_bad_response", _NOT_VLLM)
        return data

    def complete(self, request: dict[str, Any]) -> ModelCallRecord:
        """Send a chat request, or a token-in completion request when it has `prompt`."""
        record = ModelCallRecord(request=request, policy_version=self.policy_version)
        path = "/completions" if "prompt" in request else "/chat/completions"
        started = time.perf_counter()
        response = self._post(record, started, path, request)
        record.latency_ms = (time.perf_counter() - started) * 1000
        if response.status_code >= 400:
            raise self._http_error(record, response)
        try:
            record.response = response.json()
        except ValueError as exc:
            raise self._fail(record, started, "model_bad_response", "body is not JSON") from exc
        if not self.capture_tokens and "prompt" not in request:
            return _fill_without_tokens(record)
        return _fill_tokens(record)

    def _post(
        self,
        record: ModelCallRecord,
        started: float,
        path: str,
        body: dict[str, Any],
        *,
        at_root: bool = False,
    ) -> httpx.Response:
        """POST to a replica leased for the call; one that does not answer, or answers
        5xx, is marked down so the retry goes elsewhere."""
        try:
            lease = self.upstreams.acquire()
        except NoReplicaError as exc:
            raise self._fail(record, started, "model_unreachable", str(exc)) from exc
        url = lease.url.removesuffix("/v1") if at_root else lease.url
        try:
            response = self._http.post(f"{url}{path}", json=body)
        except httpx.TimeoutException as exc:
            raise self._fail(record, started, "model_timeout", str(exc) or "timed out") from exc
        except httpx.TransportError as exc:
            lease.fail(f"unreachable: {exc}")
            raise self._fail(record, started, "model_unreachable", str(exc)) from exc
        finally:
            lease.release()
        if response.status_code >= 500:
            lease.fail(f"answered {response.status_code}")
        return response

    def _fail(
        self, record: ModelCallRecord, started: float, kind: str, message: str
    ) -> ModelCallError:
        record.latency_ms = (time.perf_counter() - started) * 1000
        record.error = f"{kind}: {message}"
        return ModelCallError(kind, message, record)

    def _http_error(self, record: ModelCallRecord, response: httpx.Response) -> ModelCallError:
        text = response.text[:2000]
        record.error = f"HTTP {response.status_code}: {text}"
        if response.status_code >= 500:
            kind = "model_server_error"
        elif any(marker in text.lower() for marker in _OVERFLOW_MARKERS):
            kind = "context_overflow"
        else:
            kind = "model_bad_request"
        return ModelCallError(kind, record.error, record)


def _fill_tokens(record: ModelCallRecord) -> ModelCallRecord:
    """Copy token ids and logprobs out of the response and check they are consistent."""
    body = record.response
    choice = (body.get("choices") or [{}])[0]
    record.finish_reason = choice.get("finish_reason") or ""
    record.usage = body.get("usage") or {}
    record.prompt_token_ids = list(
        body.get("prompt_token_ids") or choice.get("prompt_token_ids") or []
    )
    record.completion_token_ids = list(choice.get("token_ids") or [])
    record.completion_logprobs = _logprobs(choice.get("logprobs") or {})
    prompt_tokens = record.usage.get("prompt_tokens")
    if not record.prompt_token_ids or not record.completion_token_ids:
        raise ModelCallError(
            "token_capture_missing",
            "response lacks prompt_token_ids or token_ids; is the server vLLM with "
            "return_token_ids support?",
            record,
        )
    if prompt_tokens is not None and prompt_tokens != len(record.prompt_token_ids):
        raise ModelCallError(
            "token_count_mismatch",
            f"usage.prompt_tokens={prompt_tokens} but {len(record.prompt_token_ids)} "
            "prompt_token_ids came back",
            record,
        )
    if len(record.completion_logprobs) != len(record.completion_token_ids):
        raise ModelCallError(
            "token_count_mismatch",
            f"{len(record.completion_token_ids)} completion tokens but "
            f"{len(record.completion_logprobs)} logprobs",
            record,
        )
    return record


def _fill_without_tokens(record: ModelCallRecord) -> ModelCallRecord:
    """A chat reply from a server that may return no token ids: the call is recorded with
    no tokens at all (ids or logprobs alone cannot be trained on), so exports rebuild the
    conversation from its messages with the student's chat template."""
    body = record.response
    choice = (body.get("choices") or [{}])[0]
    record.finish_reason = choice.get("finish_reason") or ""
    record.usage = body.get("usage") or {}
    record.prompt_token_ids, record.completion_token_ids, record.completion_logprobs = [], [], []
    return record


def _logprobs(data: dict[str, Any]) -> list[float]:
    """Per-token logprobs from a chat (`content`) or a completion (`token_logprobs`) reply."""
    if "token_logprobs" in data:
        return [float(x) if x is not None else 0.0 for x in data["token_logprobs"]]
    return [float(item.get("logprob", 0.0)) for item in data.get("content") or []]
