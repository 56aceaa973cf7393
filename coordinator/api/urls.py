"""Routes of the API v1 (docs/protocol.md section 13), mounted at ``/api/v1/`` by ``config/urls.py``."""

from django.urls import path

from . import docs, fastpath, lifecycle, scaling, views

app_name = "api-v1"

urlpatterns = [
    path(
        "groups/<str:stream_prefix>/<str:consumer_group>/heartbeat",
        fastpath.heartbeat,  # steady heartbeats answered before DRF; everything else: HeartbeatView
        name="heartbeat",
    ),
    path("routing/<str:stream_prefix>", views.RoutingView.as_view(), name="routing"),
    path(
        "autoscaling/<str:stream_prefix>/<str:consumer_group>",
        scaling.group_scaling,  # for a scaler: the scrape token of /metrics (docs/autoscaling.md)
        name="autoscaling",
    ),
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
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/shards/<str:shard>/redeliver",
        lifecycle.RedeliverView.as_view(),
        name="admin-redeliver",
    ),
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/shards/<str:shard>/skip",
        lifecycle.SkipView.as_view(),
        name="admin-skip",
    ),
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/release-drain",
        lifecycle.ReleaseDrainView.as_view(),
        name="admin-release-drain",
    ),
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/dead-letters",
        lifecycle.DeadLettersView.as_view(),
        name="admin-dead-letters",
    ),
    # replay and purge before <dead_letter_id>: those two names are not ids (an id is "<ms>-<seq>").
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/dead-letters/replay",
        lifecycle.ReplayDeadLettersView.as_view(),
        name="admin-dead-letters-replay",
    ),
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/dead-letters/purge",
        lifecycle.PurgeDeadLettersView.as_view(),
        name="admin-dead-letters-purge",
    ),
    path(
        "admin/groups/<str:stream_prefix>/<str:consumer_group>/dead-letters/<str:dead_letter_id>",
        lifecycle.DeadLetterView.as_view(),
        name="admin-dead-letter",
    ),
    path(
        "admin/stream-prefixes/<str:stream_prefix>/retention",
        lifecycle.RetentionView.as_view(),
        name="admin-retention",
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
    path("schema/", docs.SchemaView.as_view(api_version="v1"), name="schema"),
    path("docs/", docs.SwaggerView.as_view(url_name="api-v1:schema"), name="docs"),
    path("redoc/", docs.RedocView.as_view(url_name="api-v1:schema"), name="redoc"),
]
