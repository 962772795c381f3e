"""Builders for the SFT job tests."""

from __future__ import annotations

from typing import Any

from training.models import SFTJob
from training.services.sft_jobs import SFTJobSettings, sft_job_create


def job_create(export, policy, model_dir, **settings: Any) -> SFTJob:
    return sft_job_create(
        export=export,
        base_policy=policy,
        base_model_dir=str(model_dir),
        job_settings=SFTJobSettings(**settings),
        enqueue=False,
    )
