"""Pages must work offline: every script and stylesheet is served from our static files,
compressed and cacheable once collected."""

from __future__ import annotations

import re
from pathlib import Path

from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.templatetags.static import static
from django.test import Client

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


def test_collected_files_are_served_compressed_and_cached_for_a_year(tmp_path, settings) -> None:
    """As in production: collectstatic writes hashed names with gzip copies, and WhiteNoise
    answers a hashed name gzipped and immutable, plotly.js (4.8 MB) included."""
    settings.DEBUG = False
    settings.STATIC_ROOT = tmp_path
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
    }
    call_command("collectstatic", interactive=False, verbosity=0)
    url = static("vendor/plotly/plotly.min.js")
    assert re.search(r"plotly\.min\.[0-9a-f]{12}\.js$", url)

    response = Client().get(url, HTTP_ACCEPT_ENCODING="gzip, deflate, br")
    assert response.status_code == 200
    assert response["Content-Encoding"] == "gzip"
    assert int(response["Content-Length"]) < 2_000_000  # about a third of the plain file
    assert "immutable" in response["Cache-Control"]
    assert int(re.search(r"max-age=(\d+)", response["Cache-Control"])[1]) >= 365 * 24 * 3600
    # A name without its hash may change under the same URL, so it is not cached for long.
    plain = Client().get("/static/vendor/plotly/plotly.min.js")
    assert "immutable" not in plain.get("Cache-Control", "")
