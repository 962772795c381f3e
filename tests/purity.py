"""Importing every module of a package in a fresh interpreter, with no Django settings, to
see what it loads on its own (the pure harness's and the wire protocols' contracts)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.paths import ROOT

# The apps and the frameworks a pure package must never pull in.
FORBIDDEN = ["django", "rest_framework", "celery", "kombu", "trajectories", "training", "config"]

# `__main__` runs a CLI when imported; the modules it delegates to are imported anyway.
PROBE = """
import importlib, json, pkgutil, sys
package = importlib.import_module(sys.argv[1])
names = [m.name for m in pkgutil.walk_packages(package.__path__, package.__name__ + ".")]
names = [n for n in names if not n.endswith(".__main__")]
for name in names:
    importlib.import_module(name)
print(json.dumps({"modules": names, "loaded": sorted(sys.modules)}))
"""


def imported_alone(package: str) -> tuple[list[str], list[str]]:
    """(the package's modules, every module the interpreter had loaded after importing them).
    A fresh interpreter, so nothing this test process already imported can hide an import."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "CELERY"))}
    env["PYTHONPATH"] = str(ROOT)
    completed = subprocess.run(
        [sys.executable, "-c", PROBE, package],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout.strip().splitlines()[-1])
    return report["modules"], report["loaded"]
