"""The recording proxy's wire protocols: pure Python, no Django, no harness.

An agent speaks chat completions, Anthropic Messages or OpenAI Responses; every call
reaches vLLM as a chat completion with its tokens captured. This package is what that
takes, byte for byte: the three APIs as peer dialects (dialects.py; the translations in
messages/ and responses/, chat's own handling in chat.py), one error shaper (errors.py),
the stream relay (relay.py, sse.py), what a call leaves to be recorded (record.py), and
the session's sampling overrides (sampling.py). The web side, with its views, limits,
upstream and database, is trajectories/proxy/.
"""
