"""Pages must work offline: every script and stylesheet is served from our static files."""

from __future__ import annotations

import re
from pathlib import Path

from django.contrib.staticfiles import finders

from tests.paths import ROOT


def test_plotly_and_htmx_resolve_from_installed_packages() -> None:
    plotly = finders.find("vendor/plotly/plotly.min.js")
    htmx = finders.find("htmx/htmx.min.js")
    assert plotly and Path(plotly).stat().st_size > 1_000_000
    assert htmx and "htmx" in Path(htmx).read_text()[:5000]


def test_no_template_loads_anything_from_another_host() -> None:
    remote = re.compile(r"""(src|href)\s*=\s*["'](https?:)?//""", re.IGNORECASE)
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "templates").rglob("*.html")
        if remote.search(path.read_text())
    ]
    assert offenders == []
