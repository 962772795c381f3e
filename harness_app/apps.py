from django.apps import AppConfig


class HarnessAppConfig(AppConfig):
    name = "harness_app"
    verbose_name = "Harness: corpora, benchmarks, policies"

    def ready(self) -> None:
        # Register this app's Celery tasks by name in every process, the web included:
        # services enqueue them by name (harness_app/queues.py) and never import them.
        from harness_app import tasks  # noqa: F401
