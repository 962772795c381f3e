"""The recording proxy's routes (trajectories/proxy.py), on their own so that the WSGI entry
(config/wsgi.py) can resolve /proxy/ calls against these five patterns alone."""

from django.urls import path

from trajectories import proxy

# Consulted only where this is the URLconf, i.e. on the WSGI entry's path for /proxy/.
handler404 = proxy.proxy_not_found
handler500 = proxy.proxy_server_error

urlpatterns = [
    path(
        "proxy/<str:key>/v1/chat/completions",
        proxy.proxy_chat_completions,
        name="proxy_chat_completions",
    ),
    path("proxy/<str:key>/v1/messages", proxy.proxy_messages, name="proxy_messages"),
    path(
        "proxy/<str:key>/v1/messages/count_tokens",
        proxy.proxy_count_tokens,
        name="proxy_count_tokens",
    ),
    path("proxy/<str:key>/v1/responses", proxy.proxy_responses, name="proxy_responses"),
    path("proxy/<str:key>/v1/models", proxy.proxy_models, name="proxy_models"),
]
