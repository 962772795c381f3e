from django.urls import path

from harness_app import views

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
]
