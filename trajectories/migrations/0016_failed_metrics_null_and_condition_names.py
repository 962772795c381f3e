"""Two data fixes, no schema change.

- A failed or cancelled episode has no metrics: its recalls, tool diversity and reward were
  stored as measured when the run broke off (mostly 0.0), so pages showed recall 0.000 and
  "recall ≤" filters found it. They become null, as services/rollouts.py now writes them;
  turns and format errors, counts of what happened, are kept.
- Three ablation conditions took one name per mechanism (minus_verify →
  minus_verification, minus_sentence_compress → minus_compression, minus_content_dedup →
  minus_dedup); stored matrices, evaluation runs and their batches are renamed to match.

Neither is undone on the way back: the old zeros and names said nothing the new ones do not.
"""

from django.db import migrations

UNSCORED = ("failed", "cancelled")
RENAMED = {
    "minus_verify": "minus_verification",
    "minus_sentence_compress": "minus_compression",
    "minus_content_dedup": "minus_dedup",
}


def unscored_metrics_null(apps, schema_editor):
    Episode = apps.get_model("trajectories", "Episode")
    Episode.objects.filter(status__in=UNSCORED).update(
        curated_recall=None,
        trajectory_recall=None,
        final_answer_recall=None,
        tool_diversity=None,
        reward=None,
        reward_components={},
        metrics={},
    )


def _renamed(names):
    return [RENAMED.get(name, name) for name in names]


def condition_names_one(apps, schema_editor):
    for name, new in RENAMED.items():
        apps.get_model("trajectories", "RolloutBatch").objects.filter(
            evaluation_condition=name
        ).update(evaluation_condition=new)
    for evaluation in apps.get_model("trajectories", "EvaluationRun").objects.all():
        if set(evaluation.conditions) & set(RENAMED):
            evaluation.conditions = _renamed(evaluation.conditions)
            evaluation.save(update_fields=["conditions"])
    for matrix in apps.get_model("trajectories", "AblationMatrix").objects.all():
        entries = matrix.result.get("conditions", []) if matrix.result else []
        if not set(matrix.conditions) & set(RENAMED) and not any(
            e.get("condition") in RENAMED for e in entries
        ):
            continue
        matrix.conditions = _renamed(matrix.conditions)
        for entry in entries:
            entry["condition"] = RENAMED.get(entry.get("condition"), entry.get("condition"))
        matrix.save(update_fields=["conditions", "result"])


class Migration(migrations.Migration):
    dependencies = [
        ("trajectories", "0015_ablation_matrix_retriever"),
    ]

    operations = [
        migrations.RunPython(unscored_metrics_null, migrations.RunPython.noop),
        migrations.RunPython(condition_names_one, migrations.RunPython.noop),
    ]
