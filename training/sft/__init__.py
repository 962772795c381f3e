"""SFT beside RL (training/rl/): episodes as SFT records (`records.py`), export lines as
training examples (`examples.py`), the LoRA trainer (`train.py`) and what a job may ask of
it (`settings.py`). The jobs' rows, pages, API and services share one base with RL jobs
(training/models/jobs.py, training/services/jobs.py). Nothing is imported here: `train.py`
and `examples.py` load without Django, `records.py` reads the database."""
