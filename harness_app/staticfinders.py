"""Serve plotly.js from the installed plotly wheel.

The Python package ships the exact plotly.min.js that its figures expect, so pointing the
static files machinery at it keeps the page offline-capable with no vendored copy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_DIR = Path(plotly.__file__).resolve().parent / "package_data"
PLOTLY_PREFIX = "vendor/plotly"
PLOTLY_FILES = ("plotly.min.js",)


class PlotlyFinder(BaseFinder):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.storage = FileSystemStorage(location=str(PLOTLY_DIR))
        self.storage.prefix = PLOTLY_PREFIX  # type: ignore[attr-defined]

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    # The stubs describe find() with overloads on find_all; one body serves both.
    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        name = path.removeprefix(PLOTLY_PREFIX + "/")
        if path.startswith(PLOTLY_PREFIX + "/") and name in PLOTLY_FILES:
            match = str(PLOTLY_DIR / name)
            return [match] if find_all else match
        return [] if find_all else None

    def list(self, ignore_patterns: Any) -> Any:
        for name in PLOTLY_FILES:
            yield name, self.storage
