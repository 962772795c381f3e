from django.urls import path

from trajectories import views

urlpatterns = [
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
]
