"""The three APIs the recording proxy speaks, each a `Dialect` of one chat call.

Every call reaches vLLM as a chat completion, whatever API the agent spoke: chat
completions go as they are; Anthropic Messages (Claude Code) and OpenAI Responses (Codex)
are translated (messages/, responses/) and their answers translated back, whole or event
by event. One upstream route means one token capture (`return_token_ids`, logprobs), one
way prompts are rendered (the served chat template), and one stored shape for
reconstruction, exports and the UI. The choice and its cost are in docs/proxy.md.

The three are peers: each reads its request, says errors in its API's own shape (through
`error_body`, the one shaper), answers whole, and makes its events from the upstream's.
An answer is an `Answer` (status, bytes, content type), which the web side sends as it is.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson

from harness_app.wire.chat import Asked, ChatStream, needs_stripping, strip_added
from harness_app.wire.errors import (
    CHAT_API,
    MESSAGES_API,
    RESPONSES_API,
    error_body,
    upstream_message,
)
from harness_app.wire.messages.answer import MessagesStream, messages_response_from_chat
from harness_app.wire.messages.request import chat_request_from_messages
from harness_app.wire.responses.answer import ResponsesStream, responses_response_from_chat
from harness_app.wire.responses.request import chat_request_from_responses

JSON = "application/json"


@dataclass(frozen=True)
class Answer:
    """An answer to the caller: an HTTP status, its body and its content type."""

    status: int
    body: bytes
    content_type: str = JSON


class EventStream(Protocol):
    """The caller's events, made from the upstream's chat events one at a time."""

    keeps_prompt_ids: bool  # whether chunks reach `feed` with the prompt's ids in them

    def feed(self, chunk: dict[str, Any], event: bytes, prompt_tokens: int | None) -> bytes: ...
    def other(self, event: bytes) -> bytes: ...
    def finish(self, event: bytes) -> bytes: ...
    def error(self, message: str) -> bytes: ...


class Translator(Protocol):
    def feed(self, chunk: Mapping[str, Any]) -> bytes: ...
    def finish(self) -> bytes: ...
    def error(self, message: str) -> bytes: ...


class TranslatedStream:
    """A translated API's events: the chat events are read, never passed on."""

    keeps_prompt_ids = False

    def __init__(self, translator: Translator) -> None:
        self.translator = translator

    def feed(self, chunk: dict[str, Any], event: bytes, prompt_tokens: int | None) -> bytes:
        if prompt_tokens is not None:
            # The translators report the prompt's size at once (Anthropic's message_start);
            # the relay counted the ids it cut out rather than decoding them.
            usage = {**(chunk.get("usage") or {}), "prompt_tokens": prompt_tokens}
            chunk = {**chunk, "usage": usage}
        return self.translator.feed(chunk)

    def other(self, event: bytes) -> bytes:
        return b""

    def finish(self, event: bytes) -> bytes:
        return self.translator.finish()

    def error(self, message: str) -> bytes:
        return self.translator.error(message)


class Dialect(ABC):
    """One API: its name as recorded, what its requests are called, and its translations."""

    api = ""
    what = ""

    @abstractmethod
    def to_chat(self, body: Any) -> dict[str, Any]:
        """The request as the chat request vLLM gets; ProtocolError names a bad field."""

    def error(self, status: int, message: str, kind: str, param: str | None = None) -> Answer:
        return Answer(status, orjson.dumps(error_body(self.api, status, message, kind, param)))

    def refused(self, status: int, content: bytes, content_type: str) -> Answer:
        """The upstream's own refusal: vLLM speaks OpenAI's error shape, which OpenAI's
        APIs pass on as it is."""
        return Answer(status, content, content_type)

    def not_json(self, status: int, content: bytes, content_type: str) -> Answer:
        """An upstream answer that is not JSON: nothing to translate."""
        return self.error(502, "the model server answered with no JSON", "api_error")

    @abstractmethod
    def whole(
        self, payload: dict[str, Any], raw: bytes, *, asked: Asked, caller: Mapping[str, Any]
    ) -> Answer:
        """The upstream's whole answer (`payload` decoded, `raw` as sent) in this API."""

    @abstractmethod
    def stream(self, caller: Mapping[str, Any], asked: Asked) -> EventStream:
        """This API's events for one streamed answer."""


class ChatDialect(Dialect):
    """Chat completions: the request is already a chat request, the answer goes as vLLM
    gave it, less what the proxy added."""

    api = CHAT_API
    what = "a chat completion request"

    def to_chat(self, body: Any) -> dict[str, Any]:
        if not isinstance(body, dict):
            raise ValueError("the request body must be a JSON object")
        return body

    def not_json(self, status: int, content: bytes, content_type: str) -> Answer:
        # The caller speaks the upstream's API: what it sent goes on as it is.
        return Answer(status, content, content_type)

    def whole(
        self, payload: dict[str, Any], raw: bytes, *, asked: Asked, caller: Mapping[str, Any]
    ) -> Answer:
        if not needs_stripping(asked):
            return Answer(200, raw)
        return Answer(200, orjson.dumps(strip_added(payload, asked)))

    def stream(self, caller: Mapping[str, Any], asked: Asked) -> EventStream:
        return ChatStream(asked)


class MessagesDialect(Dialect):
    api = MESSAGES_API
    what = "an Anthropic Messages request"

    def to_chat(self, body: Any) -> dict[str, Any]:
        return chat_request_from_messages(body)

    def refused(self, status: int, content: bytes, content_type: str) -> Answer:
        return self.error(status, upstream_message(status, content), "api_error")

    def whole(
        self, payload: dict[str, Any], raw: bytes, *, asked: Asked, caller: Mapping[str, Any]
    ) -> Answer:
        answer = messages_response_from_chat(payload, model=_caller_model(caller))
        return Answer(200, orjson.dumps(answer))

    def stream(self, caller: Mapping[str, Any], asked: Asked) -> EventStream:
        return TranslatedStream(MessagesStream(model=_caller_model(caller)))


class ResponsesDialect(Dialect):
    api = RESPONSES_API
    what = "an OpenAI Responses request"

    def to_chat(self, body: Any) -> dict[str, Any]:
        return chat_request_from_responses(body)

    def whole(
        self, payload: dict[str, Any], raw: bytes, *, asked: Asked, caller: Mapping[str, Any]
    ) -> Answer:
        answer = responses_response_from_chat(payload, model=_caller_model(caller), request=caller)
        return Answer(200, orjson.dumps(answer))

    def stream(self, caller: Mapping[str, Any], asked: Asked) -> EventStream:
        return TranslatedStream(ResponsesStream(model=_caller_model(caller), request=caller))


def _caller_model(caller: Mapping[str, Any]) -> str:
    # The answer names the model the agent asked for, as the real services do; the served
    # name (after the session's model_map) is recorded as the policy version.
    return str(caller.get("model") or "")


CHAT = ChatDialect()
MESSAGES = MessagesDialect()
RESPONSES = ResponsesDialect()
