from django.apps import AppConfig


class HarnessAppConfig(AppConfig):
    name = "harness_app"
    verbose_name = "Harness: corpora, benchmarks, policies"
