"""The training forms: `jobs.py` what the launch forms share (a job's settings drawn from
its kind's settings dataclass), `rl_jobs.py` and `sft_jobs.py` each kind's launch form,
`exports.py` the SFT export form. Re-exported, so `training.forms.RLJobLaunchForm` works."""

from training.forms.exports import SFTExportCreateForm
from training.forms.rl_jobs import RLJobLaunchForm
from training.forms.sft_jobs import SFTJobLaunchForm

__all__ = ["RLJobLaunchForm", "SFTExportCreateForm", "SFTJobLaunchForm"]
