"""The pure-Python search harness.

Nothing in this package may import Django, the apps, or Celery: an import-linter contract
and a subprocess test enforce that, so any RL framework can drive the harness directly.
"""
