"""Talking to an OpenAI-compatible server (vLLM) token-faithfully.

client.py sends chat completions and captures token ids and logprobs; chat_policy.py keeps
an append-only conversation and turns replies into tool calls; reconstruct.py rebuilds
training sequences from recorded calls by prefix merging.
"""
