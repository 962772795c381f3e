"""A small outside agent for the recording proxy's end-to-end test: the real `openai` client.

    python proxy_agent.py BASE_URL MODEL TURNS

It runs a tool loop: each turn asks the model (with a tool offered), appends the reply
exactly as it came back and then a tool result, whatever the model said: a 135M model's
tool calls are unreliable, and what the test checks is the recording, not the model.
Then it repeats the last request twice, once streamed and once not, so the test can
compare the two recordings. It prints one JSON line with what it saw.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the notes for a phrase.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        },
    }
]
SAMPLING: dict[str, Any] = {"temperature": 0.0, "max_tokens": 24, "seed": 3}


def main(base_url: str, model: str, turns: int) -> None:
    client = OpenAI(base_url=base_url, api_key="not-used-the-key-is-in-the-url", max_retries=0)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a research assistant. Use the search tool."},
        {"role": "user", "content": "Which river flows through Paris?"},
    ]
    replies = []
    for turn in range(turns):
        completion = client.chat.completions.create(
            model=model, messages=messages, tools=TOOLS, **SAMPLING
        )
        message = completion.choices[0].message
        replies.append(message.content or "")
        assistant: dict[str, Any] = {"role": "assistant", "content": message.content or ""}
        if message.tool_calls:
            assistant["tool_calls"] = [c.model_dump() for c in message.tool_calls]
        messages.append(assistant)
        call_id = message.tool_calls[0].id if message.tool_calls else f"call_{turn}"
        messages.append(
            {"role": "tool", "tool_call_id": call_id, "content": f"note {turn}: the Seine."}
        )
    stream = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, stream=True, **SAMPLING
    )
    streamed = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    whole = client.chat.completions.create(model=model, messages=messages, tools=TOOLS, **SAMPLING)
    # vLLM answers these as null when not asked for; the proxy must leave them so.
    leaked = (
        getattr(whole, "prompt_token_ids", None) is not None
        or getattr(whole.choices[0], "token_ids", None) is not None
        or whole.choices[0].logprobs is not None
    )
    print(
        json.dumps(
            {
                "replies": replies,
                "streamed": streamed,
                "whole": whole.choices[0].message.content or "",
                "leaked_token_fields": leaked,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
