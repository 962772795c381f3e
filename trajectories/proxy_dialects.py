"""The three APIs the recording proxy speaks, each as a `Dialect` of one chat call.

Every call reaches vLLM as a chat completion, whatever API the agent spoke: chat
completions pass through; Anthropic Messages (Claude Code) and OpenAI Responses (Codex)
are translated (harness_app/harness/llm/anthropic_protocol.py, responses_protocol.py)
and their answers translated back, whole or event by event. One upstream route means one
token capture (`return_token_ids`, logprobs), one way prompts are rendered (the served
chat template), and one stored shape for reconstruction, exports and the UI. The choice
and its cost are in docs/proxy.md.

A dialect also says errors in its API's own shape, so the agent's client raises what it
would have raised against the real service.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

import orjson
from django.http import HttpResponse, JsonResponse

from harness_app.harness.llm.anthropic_protocol import (
    MessagesStream,
    anthropic_error,
    anthropic_error_from_upstream,
    chat_request_from_messages,
    messages_response_from_chat,
)
from harness_app.harness.llm.proxy_protocol import Asked, needs_stripping, strip_added
from harness_app.harness.llm.responses_protocol import (
    ResponsesStream,
    chat_request_from_responses,
    responses_response_from_chat,
)


class StreamTranslator(Protocol):
    def feed(self, chunk: Mapping[str, Any]) -> bytes: ...
    def finish(self) -> bytes: ...
    def error(self, message: str) -> bytes: ...


class Dialect:
    """Chat completions: the request is already a chat request, the answer goes as is."""

    api = "chat"
    what = "a chat completion request"

    def to_chat(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def error(self, status: int, message: str, kind: str, param: str | None = None) -> JsonResponse:
        # The OpenAI error shape, so the agent's client raises a readable exception.
        body = {"error": {"message": message, "type": kind, "param": param, "code": status}}
        return JsonResponse(body, status=status)

    def refused(self, status: int, content: bytes, content_type: str) -> HttpResponse:
        """The upstream's own refusal (vLLM speaks OpenAI's error shape)."""
        return HttpResponse(content, status=status, content_type=content_type)

    def whole(
        self, payload: dict[str, Any], raw: bytes, *, asked: Asked, caller: Mapping[str, Any]
    ) -> HttpResponse:
        if not needs_stripping(asked):
            return HttpResponse(raw, content_type="application/json")
        return HttpResponse(
            orjson.dumps(strip_added(payload, asked)), content_type="application/json"
        )

    def stream(self, caller: Mapping[str, Any]) -> StreamTranslator | None:
        """None: the chat events are relayed one for one."""
        return None


class MessagesDialect(Dialect):
    api = "messages"
    what = "an Anthropic Messages request"

    def to_chat(self, body: Any) -> dict[str, Any]:
        return chat_request_from_messages(body)

    def error(self, status: int, message: str, kind: str, param: str | None = None) -> JsonResponse:
        where = f" ({param})" if param else ""
        return JsonResponse(anthropic_error(status, message + where), status=status)

    def refused(self, status: int, content: bytes, content_type: str) -> HttpResponse:
        return JsonResponse(anthropic_error_from_upstream(status, content), status=status)

    def whole(
        self, payload: dict[str, Any], raw: bytes, *, asked: Asked, caller: Mapping[str, Any]
    ) -> HttpResponse:
        answer = messages_response_from_chat(payload, model=_caller_model(caller))
        return HttpResponse(orjson.dumps(answer), content_type="application/json")

    def stream(self, caller: Mapping[str, Any]) -> StreamTranslator:
        return MessagesStream(model=_caller_model(caller))


class ResponsesDialect(Dialect):
    api = "responses"
    what = "an OpenAI Responses request"

    def to_chat(self, body: Any) -> dict[str, Any]:
        return chat_request_from_responses(body)

    def whole(
        self, payload: dict[str, Any], raw: bytes, *, asked: Asked, caller: Mapping[str, Any]
    ) -> HttpResponse:
        answer = responses_response_from_chat(payload, model=_caller_model(caller), request=caller)
        return HttpResponse(orjson.dumps(answer), content_type="application/json")

    def stream(self, caller: Mapping[str, Any]) -> StreamTranslator:
        return ResponsesStream(model=_caller_model(caller), request=caller)


def _caller_model(caller: Mapping[str, Any]) -> str:
    # The answer names the model the agent asked for, as the real services do; the served
    # name (after the session's model_map) is recorded as the policy version.
    return str(caller.get("model") or "")


CHAT = Dialect()
MESSAGES = MessagesDialect()
RESPONSES = ResponsesDialect()
