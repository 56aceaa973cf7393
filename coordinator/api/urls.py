"""Routes of the API v1 (docs/protocol.md section 13), mounted at ``/api/v1/`` by ``config/urls.py``."""

from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from . import views

app_name = "api-v1"

urlpatterns = [
    path(
        "groups/<str:stream_prefix>/<str:consumer_group>/heartbeat",
        views.HeartbeatView.as_view(),
        name="heartbeat",
    ),
    path("routing/<str:stream_prefix>", views.RoutingView.as_view(), name="routing"),
    path("admin/groups", views.AdminGroupsView.as_view(), name="admin-groups"),
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>",
        views.AdminGroupView.as_view(),
        name="admin-group",
    ),
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/max-concurrency",
        views.MaxConcurrencyView.as_view(),
        name="admin-max-concurrency",
    ),
    path(
        "admin/stream-prefixes/<str:stream_prefix>/shard-count",
        views.ShardCountView.as_view(),
        name="admin-shard-count",
    ),
    path(
        "admin/stream-prefixes/<str:stream_prefix>",
        views.StreamPrefixView.as_view(),
        name="admin-stream-prefix",
    ),
    path("schema/", SpectacularAPIView.as_view(api_version="v1"), name="schema"),
    path("docs/", SpectacularSwaggerView.as_view(url_name="api-v1:schema"), name="docs"),
]
