from django.urls import path

from training.views import exports, rl_jobs, sft_jobs

urlpatterns = [
    path("rl/", rl_jobs.rl_job_list, name="rl_job_list"),
    path("rl/new/", rl_jobs.rl_job_launch, name="rl_job_launch"),
    path("rl/<int:pk>/", rl_jobs.rl_job_detail, name="rl_job_detail"),
    path("rl/<int:pk>/progress/", rl_jobs.rl_job_progress, name="rl_job_progress"),
    path("rl/<int:pk>/cancel/", rl_jobs.rl_job_cancel, name="rl_job_cancel"),
    path("sft/", sft_jobs.sft_job_list, name="sft_job_list"),
    path("sft/new/", sft_jobs.sft_job_launch, name="sft_job_launch"),
    path("sft/<int:pk>/", sft_jobs.sft_job_detail, name="sft_job_detail"),
    path("sft/<int:pk>/progress/", sft_jobs.sft_job_progress, name="sft_job_progress"),
    path("sft/<int:pk>/cancel/", sft_jobs.sft_job_cancel, name="sft_job_cancel"),
    path("sft/<int:pk>/resume/", sft_jobs.sft_job_resume, name="sft_job_resume"),
    path("sft/<int:pk>/serve/", sft_jobs.sft_job_serve, name="sft_job_serve"),
    path("exports/", exports.sft_export_list, name="sft_export_list"),
    path("exports/new/", exports.sft_export_create, name="sft_export_create"),
    path("exports/new/preview/", exports.sft_export_preview, name="sft_export_preview"),
    path("exports/<int:pk>/", exports.sft_export_detail, name="sft_export_detail"),
    path("exports/<int:pk>/progress/", exports.sft_export_progress, name="sft_export_progress"),
]
