"""The recording proxy's routes (views.py), on their own so that the WSGI entry
(config/wsgi.py) can resolve /proxy/ calls against these five patterns alone."""

from django.urls import path

from trajectories.proxy import views

# Consulted only where this is the URLconf, i.e. on the WSGI entry's path for /proxy/.
handler404 = views.proxy_not_found
handler500 = views.proxy_server_error

urlpatterns = [
    path(
        "proxy/<str:key>/v1/chat/completions",
        views.proxy_chat_completions,
        name="proxy_chat_completions",
    ),
    path("proxy/<str:key>/v1/messages", views.proxy_messages, name="proxy_messages"),
    path(
        "proxy/<str:key>/v1/messages/count_tokens",
        views.proxy_count_tokens,
        name="proxy_count_tokens",
    ),
    path("proxy/<str:key>/v1/responses", views.proxy_responses, name="proxy_responses"),
    path("proxy/<str:key>/v1/models", views.proxy_models, name="proxy_models"),
]
