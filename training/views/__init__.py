"""The training pages: `jobs.py` what the job pages share, `rl_jobs.py` and `sft_jobs.py`
each kind's list, launch form, job page, progress fragment and actions, `exports.py` the
SFT export pages."""
