"""Benchmark sources (BEIR folders, HotpotQA JSON, uploaded zips), read and checked."""
