"""SFT exports, RL batches, RL jobs and policy versions live here (see docs/architecture.md)."""
