"""The harness package imports without Django, Celery or the apps (no settings needed)."""

from __future__ import annotations

from tests.purity import FORBIDDEN, imported_alone


def test_every_harness_module_imports_without_django_or_the_apps():
    modules, loaded = imported_alone("harness_app.harness")
    assert "harness_app.harness.env" in modules
    leaked = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert leaked == []
