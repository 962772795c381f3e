"""The wire protocols import without Django, the apps or the harness (no settings needed)."""

from __future__ import annotations

from tests.purity import FORBIDDEN, imported_alone


def test_every_wire_module_imports_without_django_the_apps_or_the_harness():
    modules, loaded = imported_alone("harness_app.wire")
    assert "harness_app.wire.dialects" in modules
    leaked = [
        m for m in loaded if m.split(".")[0] in FORBIDDEN or m.startswith("harness_app.harness")
    ]
    assert leaked == []
