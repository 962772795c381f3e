"""Writes for the harness app: every state change goes through a function here."""
