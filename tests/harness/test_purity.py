"""The harness package imports without Django, Celery or the apps (no settings needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = ["django", "rest_framework", "celery", "kombu", "trajectories", "training", "config"]

# Runs in a fresh interpreter so nothing this test process already imported can hide an
# import the harness makes on its own.
PROBE = """
import importlib, json, pkgutil, sys
import harness_app.harness as package
names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
# __main__ runs the CLI when imported; the modules it delegates to are imported here anyway.
names = [n for n in names if not n.endswith(".__main__")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted(sys.modules)}))
"""


def test_every_harness_module_imports_without_django_or_the_apps():
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
    assert "harness_app.harness.env" in report["modules"]
    leaked = [m for m in report["loaded"] if m.split(".")[0] in FORBIDDEN]
    assert leaked == []
