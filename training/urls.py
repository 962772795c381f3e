from django.urls import path

from training import views

urlpatterns = [
    path("rl/", views.rl_job_list, name="rl_job_list"),
    path("rl/new/", views.rl_job_launch, name="rl_job_launch"),
    path("rl/<int:pk>/", views.rl_job_detail, name="rl_job_detail"),
    path("rl/<int:pk>/progress/", views.rl_job_progress, name="rl_job_progress"),
    path("rl/<int:pk>/cancel/", views.rl_job_cancel, name="rl_job_cancel"),
    path("sft/", views.sft_job_list, name="sft_job_list"),
    path("sft/new/", views.sft_job_launch, name="sft_job_launch"),
    path("sft/<int:pk>/", views.sft_job_detail, name="sft_job_detail"),
    path("sft/<int:pk>/progress/", views.sft_job_progress, name="sft_job_progress"),
    path("sft/<int:pk>/cancel/", views.sft_job_cancel, name="sft_job_cancel"),
    path("sft/<int:pk>/resume/", views.sft_job_resume, name="sft_job_resume"),
    path("sft/<int:pk>/serve/", views.sft_job_serve, name="sft_job_serve"),
    path("exports/", views.sft_export_list, name="sft_export_list"),
    path("exports/new/", views.sft_export_create, name="sft_export_create"),
    path("exports/new/preview/", views.sft_export_preview, name="sft_export_preview"),
    path("exports/<int:pk>/", views.sft_export_detail, name="sft_export_detail"),
    path("exports/<int:pk>/progress/", views.sft_export_progress, name="sft_export_progress"),
]
