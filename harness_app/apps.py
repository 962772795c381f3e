from django.apps import AppConfig
from django.conf import settings
from django.db.models.signals import pre_save


class HarnessAppConfig(AppConfig):
    name = "harness_app"
    verbose_name = "Harness: corpora, benchmarks, policies"

    def ready(self) -> None:
        # Register this app's Celery tasks by name in every process, the web included:
        # services enqueue them by name (harness_app/queues.py) and never import them.
        from harness_app import tasks  # noqa: F401
        from harness_app.tokens import revoke_tokens_on_password_change

        # A changed password revokes the user's API tokens (harness_app/tokens.py).
        pre_save.connect(
            revoke_tokens_on_password_change,
            sender=settings.AUTH_USER_MODEL,
            dispatch_uid="revoke_tokens_on_password_change",
        )
