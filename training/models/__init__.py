"""The training app's rows: `jobs.py` what every training job shares (TrainingJob, its
status), `sft.py` SFT exports and SFT jobs, `rl.py` RL jobs with their versions and steps,
`rollout_service.py` the rollout service's requests, deliveries and leases. All re-exported,
so `training.models.SFTJob` works as before."""

from training.models.jobs import JOB_FINISHED, JobStatus, Reconstruction, TrainingJob
from training.models.rl import (
    PolicyVersion,
    RLAlgorithm,
    RLJob,
    RLMode,
    RLStep,
    RLStepStatus,
)
from training.models.rollout_service import (
    DeliveryState,
    RolloutDelivery,
    RolloutLease,
    RolloutRequest,
    RolloutRequestStatus,
)
from training.models.sft import ExportFormat, ExportStatus, SFTExport, SFTExportEpisode, SFTJob

# One status for both kinds of job; the old names stay for their many readers.
SFTJobStatus = RLJobStatus = JobStatus
SFT_JOB_FINISHED = RL_JOB_FINISHED = JOB_FINISHED

__all__ = [
    "JOB_FINISHED",
    "RL_JOB_FINISHED",
    "SFT_JOB_FINISHED",
    "DeliveryState",
    "ExportFormat",
    "ExportStatus",
    "JobStatus",
    "PolicyVersion",
    "RLAlgorithm",
    "RLJob",
    "RLJobStatus",
    "RLMode",
    "RLStep",
    "RLStepStatus",
    "Reconstruction",
    "RolloutDelivery",
    "RolloutLease",
    "RolloutRequest",
    "RolloutRequestStatus",
    "SFTExport",
    "SFTExportEpisode",
    "SFTJob",
    "SFTJobStatus",
    "TrainingJob",
]
