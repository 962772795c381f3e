"""The trainer's sampling, imposed on every call a recorded agent makes (docs/proxy.md).

A coding-agent CLI asks for what it likes: its vendor's model name, its own temperature,
32,000 max tokens. RL needs the behaviour policy to sample as the trainer says, and an
upstream with an 8,192-token context refuses 32,000 max tokens outright. So each
recording session carries overrides, applied to the chat request after any translation
and before it is forwarded:

- `model_map`: the caller's model name → the served one; `"*"` maps every other name.
- `temperature`, `top_p`: replace whatever the caller sent (or add them).
- `max_tokens`: the clamp's ceiling. With `clamp` on (the default) a larger
  `max_tokens` / `max_completion_tokens` is lowered to it, or, when no ceiling is set, to
  the upstream's context length, and a call that asks none gets it. vLLM then lowers it
  again to what the prompt leaves.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from harness_app.wire.errors import ProtocolError

_KEYS = frozenset({"model_map", "temperature", "top_p", "max_tokens", "clamp"})
MAX_TOKEN_KEYS = ("max_tokens", "max_completion_tokens")


@dataclass(frozen=True)
class SamplingOverrides:
    model_map: dict[str, str] = field(default_factory=dict)
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    clamp: bool = True

    def as_json(self) -> dict[str, Any]:
        return {
            "model_map": dict(self.model_map),
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_tokens": self.max_tokens,
            "clamp": self.clamp,
        }

    def served_model(self, asked: Any) -> Any:
        if not self.model_map:
            return asked
        return self.model_map.get(str(asked), self.model_map.get("*", asked))

    def apply(
        self, request: dict[str, Any], *, context_len: int | Callable[[], int | None] | None
    ) -> dict[str, Any]:
        """The request with the overrides in place (the same dict, changed).

        `context_len` may be a function: the upstream is asked only when a call wants more
        tokens than the session's own ceiling allows.
        """
        if self.model_map:
            request["model"] = self.served_model(request.get("model"))
        if self.temperature is not None:
            request["temperature"] = self.temperature
        if self.top_p is not None:
            request["top_p"] = self.top_p
        if not self.clamp:
            return request
        if self.max_tokens is not None and not any(k in request for k in MAX_TOKEN_KEYS):
            # The trainer's budget holds for a CLI that asks none (Codex sends none).
            request["max_tokens"] = self.max_tokens
        for key in MAX_TOKEN_KEYS:
            asked = request.get(key)
            if not isinstance(asked, int):
                continue
            ceiling = self.max_tokens
            if ceiling is None:
                ceiling = context_len() if callable(context_len) else context_len
            if ceiling and asked > ceiling:
                request[key] = ceiling
        return request


def sampling_overrides_parse(data: Any) -> SamplingOverrides:
    """Overrides from their JSON form; ProtocolError names the bad field (sampling.<key>)."""
    if data is None or data == {}:
        return SamplingOverrides()
    if not isinstance(data, dict):
        raise ProtocolError("sampling must be a JSON object", "sampling")
    unknown = sorted(set(data) - _KEYS)
    if unknown:
        raise ProtocolError(
            f"unknown sampling override {unknown[0]!r}; use {', '.join(sorted(_KEYS))}",
            f"sampling.{unknown[0]}",
        )
    return SamplingOverrides(
        model_map=_model_map(data.get("model_map")),
        temperature=_number(data, "temperature", 0.0, 2.0),
        top_p=_number(data, "top_p", 0.0, 1.0, low_open=True),
        max_tokens=_max_tokens(data.get("max_tokens")),
        clamp=_flag(data.get("clamp", True)),
    )


def _model_map(value: Any) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError("model_map must map model names to served names", "sampling.model_map")
    for asked, served in value.items():
        if not isinstance(served, str) or not served.strip() or not asked:
            raise ProtocolError(
                f"model_map[{asked!r}] must be a non-empty served model name",
                "sampling.model_map",
            )
    return {str(k): v.strip() for k, v in value.items()}


def _number(
    data: dict[str, Any], key: str, low: float, high: float, *, low_open: bool = False
) -> float | None:
    value = data.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ProtocolError(f"{key} must be a number", f"sampling.{key}")
    too_low = value <= low if low_open else value < low
    if too_low or value > high:
        bounds = f"({low}, {high}]" if low_open else f"[{low}, {high}]"
        raise ProtocolError(f"{key} must be in {bounds}, got {value}", f"sampling.{key}")
    return float(value)


def _max_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ProtocolError(
            f"max_tokens must be a positive whole number, got {value!r}", "sampling.max_tokens"
        )
    return value


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(f"clamp must be true or false, got {value!r}", "sampling.clamp")
    return value
