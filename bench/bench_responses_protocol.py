"""What the Responses API translation adds to a proxied call (harness_app/wire/responses/).

Pure Python, no server: a Codex-sized request translated to chat, a whole answer of many
tokens (carrying its token ids and logprobs, as vLLM gives it to the proxy) turned into a
response, and the same answer streamed one token per chunk, per chunk and in all.

    .venv/bin/python bench/bench_responses_protocol.py [--tokens 32000] [--repeat 20]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness_app.wire.responses.answer import ResponsesStream, responses_response_from_chat
from harness_app.wire.responses.request import chat_request_from_responses


def codex_request(turns: int = 40, tools: int = 20) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"command": {"type": "string"}}}
    items: list[dict[str, Any]] = [
        {"role": "developer", "content": [{"type": "input_text", "text": "Sandboxed. " * 100}]},
        {"role": "user", "content": [{"type": "input_text", "text": "Find the bug. " * 50}]},
    ]
    for i in range(turns):
        items.append({"type": "reasoning", "id": f"rs_{i}", "summary": []})
        items.append({"role": "assistant", "content": [{"type": "output_text", "text": "x"}]})
        call = {"type": "function_call", "call_id": f"call_{i}", "name": "shell"}
        items.append(call | {"arguments": '{"command": "cat a"}'})
        output = {"type": "function_call_output", "call_id": f"call_{i}", "output": "line\n" * 200}
        items.append(output)
    functions = [
        {"type": "function", "name": f"tool{i}", "description": "d" * 400, "parameters": schema}
        for i in range(tools - 1)
    ]
    return {
        "model": "gpt-5-codex",
        "instructions": "You are Codex. " * 500,
        "input": items,
        "tools": [*functions, {"type": "custom", "name": "apply_patch", "description": "p"}],
        "stream": True,
        "store": False,
    }


def whole_answer(tokens: int) -> dict[str, Any]:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "word " * tokens, "tool_calls": []},
        "logprobs": {"content": [{"token": "w", "logprob": -0.1} for _ in range(tokens)]},
        "finish_reason": "stop",
        "token_ids": list(range(tokens)),
    }
    return {
        "id": "chatcmpl-1",
        "prompt_token_ids": list(range(8000)),
        "choices": [choice],
        "usage": {"prompt_tokens": 8000, "completion_tokens": tokens},
    }


def chunks(tokens: int) -> list[dict[str, Any]]:
    def one(delta: dict[str, Any], **extra: Any) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "finish_reason": None, "token_ids": [7]}
        choice["logprobs"] = {"content": [{"token": "w", "logprob": -0.1}]}
        return {"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": [choice], **extra}

    out = [one({"role": "assistant", "content": ""}, prompt_token_ids=list(range(8000)))]
    out += [one({"content": "word "}) for _ in range(tokens)]
    out.append({"id": "chatcmpl-1", "choices": [], "usage": {"completion_tokens": tokens}})
    return out


def best_ms(run: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append((time.perf_counter() - started) * 1000)
    return min(times)


def stream_all(pieces: list[dict[str, Any]], request: dict[str, Any]) -> None:
    stream = ResponsesStream(model="m", request=request)
    for piece in pieces:
        stream.feed(piece)
    stream.finish()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=32000)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    request = codex_request()
    answer = whole_answer(args.tokens)
    pieces = chunks(args.tokens)
    request_ms = best_ms(lambda: chat_request_from_responses(request), args.repeat)
    whole_ms = best_ms(
        lambda: responses_response_from_chat(answer, model="m", request=request), args.repeat
    )
    stream_ms = best_ms(lambda: stream_all(pieces, request), max(3, args.repeat // 5))
    print(f"request, 162 items and 20 tools: {request_ms:.3f} ms")
    print(f"whole answer of {args.tokens} tokens: {whole_ms:.4f} ms")
    print(
        f"streamed answer of {args.tokens} chunks: {stream_ms:.1f} ms in all, "
        f"{stream_ms * 1000 / len(pieces):.2f} us per chunk"
    )


if __name__ == "__main__":
    main()
