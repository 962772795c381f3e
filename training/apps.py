from django.apps import AppConfig


class TrainingConfig(AppConfig):
    name = "training"
    verbose_name = "Training: SFT exports, RL batches and jobs"

    def ready(self) -> None:
        # Register this app's Celery tasks by name in every process, the web included:
        # services enqueue them by name (harness_app/queues.py) and never import them.
        from training import tasks  # noqa: F401
