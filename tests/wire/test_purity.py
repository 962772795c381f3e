"""The wire protocols import without Django, the apps or the harness (no settings needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ["django", "rest_framework", "celery", "kombu", "trajectories", "training", "config"]

# A fresh interpreter, so nothing this test process already imported can hide an import.
PROBE = """
import importlib, json, pkgutil, sys
import harness_app.wire as package
names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted(sys.modules)}))
"""


def test_every_wire_module_imports_without_django_the_apps_or_the_harness():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "CELERY"))}
    env["PYTHONPATH"] = str(ROOT)
    completed = subprocess.run(
        [sys.executable, "-c", PROBE],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    assert "harness_app.wire.dialects" in report["modules"]
    leaked = [
        m
        for m in report["loaded"]
        if m.split(".")[0] in FORBIDDEN or m.startswith("harness_app.harness")
    ]
    assert leaked == []
