from django.apps import AppConfig


class TrajectoriesConfig(AppConfig):
    name = "trajectories"
    verbose_name = "Trajectories: rollouts, episodes, turns, annotations"

    def ready(self) -> None:
        # Register this app's Celery tasks by name in every process, the web included:
        # services enqueue them by name (harness_app/queues.py) and never import them.
        from trajectories import tasks  # noqa: F401
