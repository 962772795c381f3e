"""Reinforcement learning on recorded rollouts: the maths and the trainer step.

advantages.py and batches.py are plain Python (no torch, no Django), so the job loop and
the exports can use them anywhere. losses.py and trainer.py need torch (and peft,
transformers for the trainer): the optional "train" extra. parquet.py needs pyarrow.
samples.py and step_metrics.py read a rollout batch from the database; settings.py holds
what an RL job may be asked to do (its bounds, presets and RLJobError), for the job's forms,
API and service. See docs/training-rl.md.
"""
