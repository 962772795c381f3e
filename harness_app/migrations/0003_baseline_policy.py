"""Create the "baseline" PolicyConfig: the deterministic policy that needs no LLM server."""

from django.db import migrations

BASELINE = {
    "kind": "baseline",
    "base_url": "",
    "model": "",
    "sampling": {},
    "system_prompt_version": "v1",
    "tool_call_format": "openai_tools",
}


def create_baseline(apps, schema_editor):
    PolicyConfig = apps.get_model("harness_app", "PolicyConfig")
    PolicyConfig.objects.get_or_create(name="baseline", defaults=BASELINE)


def remove_baseline(apps, schema_editor):
    apps.get_model("harness_app", "PolicyConfig").objects.filter(name="baseline").delete()


class Migration(migrations.Migration):
    dependencies = [("harness_app", "0002_corpora_benchmarks")]
    operations = [migrations.RunPython(create_baseline, remove_baseline)]
