from django.urls import path

from training import views

urlpatterns = [
    path("rl/", views.rl_job_list, name="rl_job_list"),
    path("rl/new/", views.rl_job_launch, name="rl_job_launch"),
    path("rl/<int:pk>/", views.rl_job_detail, name="rl_job_detail"),
    path("rl/<int:pk>/progress/", views.rl_job_progress, name="rl_job_progress"),
    path("rl/<int:pk>/cancel/", views.rl_job_cancel, name="rl_job_cancel"),
]
