"""Rollout batches, episodes, turns and model calls live here (see docs/architecture.md)."""
