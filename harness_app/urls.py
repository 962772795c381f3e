from django.urls import path

from harness_app import views

urlpatterns = [
    path("benchmarks/", views.benchmark_list, name="benchmark_list"),
    path("benchmarks/upload/", views.benchmark_upload, name="benchmark_upload"),
    path("benchmarks/<int:pk>/", views.benchmark_detail, name="benchmark_detail"),
    path("benchmarks/imports/<int:pk>/", views.import_job_row, name="import_job_row"),
    path("policies/", views.policy_list, name="policy_list"),
    path("policies/new/", views.policy_create, name="policy_create"),
    path("policies/<int:pk>/edit/", views.policy_edit, name="policy_edit"),
    path("policies/<int:pk>/delete/", views.policy_delete, name="policy_delete"),
]
