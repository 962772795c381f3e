from django.urls import include, path

from trajectories.views import (
    ablations,
    annotation,
    batches,
    dashboard,
    episodes,
    evaluations,
    harness_tasks,
    recordings,
)

urlpatterns = [
    path("", dashboard.dashboard, name="dashboard"),
    # the recording proxy (trajectories/proxy/urls.py): the session key is the credential
    path("", include("trajectories.proxy.urls")),
    path("episodes/", episodes.episode_list, name="episode_list"),
    path(
        "episodes/download.<str:fmt>",
        episodes.episode_list_download,
        name="episode_list_download",
    ),
    path("episodes/selection/", episodes.episode_selection, name="episode_selection"),
    path("episodes/saved/", episodes.saved_filter_create, name="saved_filter_create"),
    path(
        "episodes/saved/<int:pk>/delete/", episodes.saved_filter_delete, name="saved_filter_delete"
    ),
    path("episodes/<int:pk>/", episodes.episode_detail, name="episode_detail"),
    path(
        "episodes/<int:pk>/trajectory.json",
        episodes.episode_trajectory,
        name="episode_trajectory",
    ),
    path("episodes/<int:pk>/document/", episodes.episode_document, name="episode_document"),
    path(
        "episodes/<int:pk>/turns/<int:turn>/tokens/", episodes.episode_tokens, name="episode_tokens"
    ),
    path(
        "episodes/<int:pk>/turns/<int:turn>/prompt/", episodes.episode_prompt, name="episode_prompt"
    ),
    path("groups/<int:pk>/", episodes.group_detail, name="group_detail"),
    path("compare/", episodes.compare, name="compare"),
    path("batches/new/", batches.batch_launch, name="batch_launch"),
    path("batches/progress/", dashboard.batches_progress, name="batches_progress"),
    path("batches/<int:pk>/", batches.batch_detail, name="batch_detail"),
    path("batches/<int:pk>/progress/", batches.batch_progress, name="batch_progress"),
    path("batches/<int:pk>/cancel/", batches.batch_cancel, name="batch_cancel"),
    path("ablations/new/", ablations.ablation_launch, name="ablation_launch"),
    path("ablations/<int:pk>/", ablations.ablation_detail, name="ablation_detail"),
    path("ablations/<int:pk>/progress/", ablations.ablation_progress, name="ablation_progress"),
    path("ablations/<int:pk>/matrix.csv", ablations.ablation_csv, name="ablation_csv"),
    path("ablations/<int:pk>/matrix.json", ablations.ablation_json, name="ablation_json"),
    # evaluation runs (trajectories/services/evaluations.py)
    path("evaluations/", evaluations.evaluation_list, name="evaluation_list"),
    path("evaluations/new/", evaluations.evaluation_launch, name="evaluation_launch"),
    path("evaluations/<int:pk>/", evaluations.evaluation_detail, name="evaluation_detail"),
    path(
        "evaluations/<int:pk>/progress/",
        evaluations.evaluation_progress,
        name="evaluation_progress",
    ),
    path(
        "evaluations/<int:pk>/transfer.csv",
        evaluations.evaluation_transfer_csv,
        name="evaluation_transfer_csv",
    ),
    path("evaluations/<int:pk>/cancel/", evaluations.evaluation_cancel, name="evaluation_cancel"),
    # harness tasks (trajectories/services/harness_runs.py)
    path("harness/tasks/", harness_tasks.harness_task_list, name="harness_task_list"),
    path("harness/tasks/new/", harness_tasks.harness_task_new, name="harness_task_new"),
    path("harness/tasks/<int:pk>/", harness_tasks.harness_task_detail, name="harness_task_detail"),
    path(
        "harness/groups/<int:pk>/", harness_tasks.harness_group_detail, name="harness_group_detail"
    ),
    path("harness/runs/<int:pk>/", harness_tasks.harness_run_detail, name="harness_run_detail"),
    # recording sessions behind the proxy (docs/proxy.md)
    path("recordings/", recordings.recording_list, name="recording_list"),
    path("recordings/new/", recordings.recording_create, name="recording_create"),
    path("recordings/<int:pk>/close/", recordings.recording_close, name="recording_close"),
    path("recordings/<int:pk>/revoke/", recordings.recording_revoke, name="recording_revoke"),
    # the annotator pages (trajectories/annotation.py)
    path("annotate/", annotation.annotate_queue, name="annotate_queue"),
    path("annotate/episodes/<int:pk>/", annotation.annotate_review, name="annotate_review"),
    path("annotate/episodes/<int:pk>/label/", annotation.annotate_label, name="annotate_label"),
    path("annotate/episodes/<int:pk>/skip/", annotation.annotate_skip, name="annotate_skip"),
    path("annotate/episodes/<int:pk>/undo/", annotation.annotate_undo, name="annotate_undo"),
    path("annotate/bulk/", annotation.annotate_bulk, name="annotate_bulk"),
    path("annotate/bulk/apply/", annotation.annotate_bulk_apply, name="annotate_bulk_apply"),
    path(
        "annotate/bulk/<int:pk>/undo/",
        annotation.annotate_bulk_undo,
        name="annotate_bulk_undo",
    ),
    path("annotate/agreement/", annotation.annotate_agreement, name="annotate_agreement"),
    path(
        "annotate/reward-hacking/",
        annotation.annotate_reward_hacking,
        name="annotate_reward_hacking",
    ),
]
