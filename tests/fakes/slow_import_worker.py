"""The project's Celery app for a worker whose imports pause before they start, so a test
can kill that worker while an import is surely `running` (tests/harness_app/
test_worker_lost.py). Start it with `start_worker(..., app="tests.fakes.slow_import_worker")`;
SLOW_IMPORT_S in its environment is the pause."""

from __future__ import annotations

import os
import time
from typing import Any

from celery.signals import worker_process_init

from config.celery import app

__all__ = ["app"]


@worker_process_init.connect
def _slow_imports(**_: Any) -> None:
    from harness_app.services import import_jobs

    import_now = import_jobs.benchmark_import

    def paused(**kwargs: Any) -> Any:
        time.sleep(float(os.environ.get("SLOW_IMPORT_S", "60")))
        return import_now(**kwargs)

    import_jobs.benchmark_import = paused  # type: ignore[assignment]
