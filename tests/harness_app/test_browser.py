"""A real Chromium watches an import's progress line update itself, then stop polling."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness_app.importers.records import ImportProgress
from harness_app.models import ImportJob, ImportStatus
from harness_app.roles import Role
from harness_app.services.import_jobs import ProgressFile
from harness_app.services.users import user_ensure
from tests.chromium import login

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_progress_line_follows_a_running_import(live_server, page, tmp_path: Path) -> None:
    user_ensure(username="rita", password="pw-rita-123", role=Role.RESEARCHER)
    (tmp_path / "job").mkdir()
    job = ImportJob.objects.create(
        name="big",
        fmt="beir",
        upload_path=str(tmp_path / "job" / "upload.zip"),
        status=ImportStatus.RUNNING,
    )
    progress = ProgressFile(tmp_path / "job" / "progress.json", interval=0)
    progress(ImportProgress(phase="writing", documents=100, total_documents=1000))

    login(page, live_server.url, "rita", "pw-rita-123")
    page.goto(live_server.url + "/benchmarks/")
    row = page.locator(f"#import-{job.pk}")
    assert "writing: 100 / 1000 documents (10%)" in row.inner_text()

    progress(ImportProgress(phase="writing", documents=500, total_documents=1000))
    row.get_by_text("500 / 1000 documents (50%)").wait_for(timeout=5000)  # no reload

    ImportJob.objects.filter(pk=job.pk).update(
        status=ImportStatus.DONE, message="Imported benchmark 'big'."
    )
    row.get_by_text("Imported benchmark 'big'.").wait_for(timeout=5000)
    assert row.get_attribute("hx-trigger") is None  # finished: polling stopped
    assert page.console_watcher.errors == []
