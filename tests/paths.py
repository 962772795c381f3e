"""Where the tests find the project, its demo benchmark and the shared benchmark data."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEMO_DIR = ROOT / "harness_app" / "demo_data"


def shared_data_root() -> Path:
    """../shared/data beside the project, or HARNESS_SHARED_DATA when set."""
    override = os.environ.get("HARNESS_SHARED_DATA")
    return Path(override) if override else (ROOT.parent / "shared" / "data").resolve()
