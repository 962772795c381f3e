from django.urls import path

from trajectories import proxy, views, views_annotation

urlpatterns = [
    # the recording proxy (trajectories/proxy.py): the session key is the credential
    path(
        "proxy/<str:key>/v1/chat/completions",
        proxy.proxy_chat_completions,
        name="proxy_chat_completions",
    ),
    path("proxy/<str:key>/v1/models", proxy.proxy_models, name="proxy_models"),
    path("episodes/", views.episode_list, name="episode_list"),
    path("episodes/saved/", views.saved_filter_create, name="saved_filter_create"),
    path("episodes/saved/<int:pk>/delete/", views.saved_filter_delete, name="saved_filter_delete"),
    path("episodes/<int:pk>/", views.episode_detail, name="episode_detail"),
    path("episodes/<int:pk>/document/", views.episode_document, name="episode_document"),
    path("episodes/<int:pk>/turns/<int:turn>/tokens/", views.episode_tokens, name="episode_tokens"),
    path("groups/<int:pk>/", views.group_detail, name="group_detail"),
    path("compare/", views.compare, name="compare"),
    path("batches/new/", views.batch_launch, name="batch_launch"),
    path("batches/progress/", views.batches_progress, name="batches_progress"),
    path("batches/<int:pk>/", views.batch_detail, name="batch_detail"),
    path("batches/<int:pk>/progress/", views.batch_progress, name="batch_progress"),
    path("batches/<int:pk>/cancel/", views.batch_cancel, name="batch_cancel"),
    # the annotator pages (trajectories/views_annotation.py)
    path("annotate/", views_annotation.annotate_queue, name="annotate_queue"),
    path("annotate/episodes/<int:pk>/", views_annotation.annotate_review, name="annotate_review"),
    path(
        "annotate/episodes/<int:pk>/label/", views_annotation.annotate_label, name="annotate_label"
    ),
    path("annotate/bulk/", views_annotation.annotate_bulk, name="annotate_bulk"),
    path("annotate/bulk/apply/", views_annotation.annotate_bulk_apply, name="annotate_bulk_apply"),
    path(
        "annotate/bulk/<int:pk>/undo/",
        views_annotation.annotate_bulk_undo,
        name="annotate_bulk_undo",
    ),
    path("annotate/agreement/", views_annotation.annotate_agreement, name="annotate_agreement"),
    path(
        "annotate/reward-hacking/",
        views_annotation.annotate_reward_hacking,
        name="annotate_reward_hacking",
    ),
]
