"""Operator pages in the Django admin, over the metadata store (django-rq's pattern).

Theory of operation
-------------------
``ConsumerGroup`` is a placeholder model without a table; its ModelAdmin throws the usual
add/change/delete URLs away and serves, through ``get_urls()``, every URL wrapped in
``admin_site.admin_view`` (staff login, ``never_cache``, CSRF protection):

=========================================  =======  ==================================================
``<admin>/admin_ui/consumergroup/``          GET      every group of every stream prefix (the changelist)
``.../<prefix>/<group>/``                    GET      one group: epochs, members, shards, revocations
``.../<prefix>/<group>/actions/``            GET      the forms below (no auto-refresh to type into)
``.../<prefix>/<group>/max-concurrency/``    POST     set max_concurrency
``.../<prefix>/<group>/shard-count/``        POST     confirm page, then (``confirm=yes``) reshard P
``.../<prefix>/<group>/delete/``             POST     confirm page (lag, pending), then delete
=========================================  =======  ==================================================

plus the pages of the entry lifecycle (a shard's backlog, skip, redeliver, release from a drain, dead
letters, retention, deleting a prefix), in admin_ui/lifecycle_views.py, which go through
``coordinator.operations`` (it writes their audit rows).

Every action URL is ``require_POST`` (a GET is a 405), so a link or a prefetch can never change
anything; the destructive ones answer their first POST with a confirmation page whose form posts again
with ``confirm=yes`` (the flow of Django's own "delete selected" action). Pages need
``admin_ui.view_groups``, actions ``coordinator.manage_groups`` (admin_ui/access.py); a staff user
without them gets a 403 page that names the missing permission (so does the audit trail's changelist,
for ``admin_ui.view_auditentry``).

Views validate their forms, make every change through ``coordinator.operations`` (which authorizes,
writes the audit row first and fails closed with AUDIT_UNAVAILABLE, then records the outcome, refusals
included), and map errors: a :class:`CoordinatorError` (including ``StoreUnavailable``) becomes an admin
error message or, for a page that cannot be drawn at all, an error page with the code's HTTP status
from ``coordinator.api.errors.HTTP_STATUS``, never a traceback. Reads (pages, confirmations) call the
store directly; what the pages show is arranged by admin_ui/presenters.py. The only thing the pages keep
themselves is the drain-rate samples behind a migration's ETA (admin_ui/drain_samples.py, in Django's
cache).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.contrib.auth.models import Permission
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.safestring import SafeString
from django.views.decorators.http import require_POST

from coordinator import operations
from coordinator.api.errors import HTTP_STATUS
from coordinator.protocol.errors import (
    CoordinatorError,
    GroupNotFound,
    InvalidIdentifier,
    StreamPrefixNotFound,
)
from coordinator.store import MetadataStore, get_store
from coordinator.store.redis_store import unconsumed_totals_of

from . import access, drain_samples, presenters
from .forms import MaxConcurrencyForm, RetentionForm, ShardCountForm
from .lifecycle_views import LifecycleViews, _act
from .models import AuditEntry, ConsumerGroup
from .pages import error_text, is_transient, refresh, to_detail


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nothing here is added, changed or deleted through the ModelAdmin forms: the placeholder has no
    rows, and the audit trail is append-only (written by the actions)."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(ConsumerGroup)
class ConsumerGroupAdmin(LifecycleViews, ReadOnlyAdmin):
    # -- permissions: the placeholder has no rows, so only "view" means something

    def has_module_permission(self, request: HttpRequest) -> bool:
        return access.can_view(request.user)

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return access.can_view(request.user)

    # -- URLs

    def get_urls(self) -> list[URLPattern]:
        def wrap(view: Any) -> Any:
            return self.admin_site.admin_view(_naming_the_permission(self, view))

        group = "<str:stream_prefix>/<str:consumer_group>/"
        return [
            path("", wrap(self.groups_view), name="admin_ui_consumergroup_changelist"),
            path(group, wrap(self.detail_view), name="admin_ui_group_detail"),
            path(f"{group}actions/", wrap(self.actions_view), name="admin_ui_group_actions"),
            path(
                f"{group}max-concurrency/",
                wrap(require_POST(self.set_max_concurrency_view)),
                name="admin_ui_set_max_concurrency",
            ),
            path(
                f"{group}shard-count/",
                wrap(require_POST(self.change_shard_count_view)),
                name="admin_ui_change_shard_count",
            ),
            path(f"{group}delete/", wrap(require_POST(self.delete_group_view)), name="admin_ui_delete_group"),
            *self.lifecycle_urls(wrap),
        ]

    # -- pages

    def groups_view(self, request: HttpRequest) -> HttpResponse:
        access.raise_unless_can_view(request.user)
        try:
            store = get_store()
            groups = store.list_groups()
            prefixes = {p: _describe_prefix_or_none(store, p) for p in {g["stream_prefix"] for g in groups}}
            backlogs = {
                (g["stream_prefix"], g["consumer_group"]): _backlog_or_none(
                    store, g["stream_prefix"], g["consumer_group"]
                )
                for g in groups
            }
        except CoordinatorError as e:
            return self._error_page(request, e, "Consumer groups")
        samples = {p: drain_samples.record(v) for p, v in prefixes.items() if v is not None}
        context = {
            "title": "Consumer groups",
            "groups": presenters.group_rows(groups, prefixes, backlogs, samples),
            "refresh_s": refresh(request),
        }
        return self._render(request, "admin_ui/group_list.html", context)

    def detail_view(self, request: HttpRequest, stream_prefix: str, consumer_group: str) -> HttpResponse:
        access.raise_unless_can_view(request.user)
        try:
            store = get_store()
            view = store.describe_group(stream_prefix, consumer_group)
            prefix_view = _describe_prefix_or_none(store, stream_prefix)
        except (GroupNotFound, InvalidIdentifier) as e:
            messages.error(request, error_text(e))
            return redirect("admin:admin_ui_consumergroup_changelist")
        except CoordinatorError as e:
            return self._error_page(
                request, e, f"{stream_prefix} / {consumer_group}", stream_prefix, consumer_group
            )
        samples = drain_samples.record(prefix_view) if prefix_view is not None else {}
        context = {
            **presenters.group_detail(view, prefix_view, samples),
            "title": f"{stream_prefix} / {consumer_group}",
            "can_manage": access.can_manage(request.user),
            "audit_url": self._audit_url(request, stream_prefix, consumer_group),
            "refresh_s": refresh(request),
        }
        return self._render(request, "admin_ui/group_detail.html", context, stream_prefix, consumer_group)

    def actions_view(
        self,
        request: HttpRequest,
        stream_prefix: str,
        consumer_group: str,
        *,
        max_concurrency_form: MaxConcurrencyForm | None = None,
        shard_count_form: ShardCountForm | None = None,
        retention_form: RetentionForm | None = None,
    ) -> HttpResponse:
        """The action forms; also re-rendered (400) with a form's errors when a POST does not validate."""
        access.raise_unless_can_manage(request.user)
        try:
            store = get_store()
            view = store.describe_group(stream_prefix, consumer_group)
            prefix_view = store.describe_prefix(stream_prefix)
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return to_detail(stream_prefix, consumer_group)
        invalid = any(f is not None for f in (max_concurrency_form, shard_count_form, retention_form))
        retention = presenters.retention_view(prefix_view)
        context = {
            "title": f"Actions: {stream_prefix} / {consumer_group}",
            "view": view,
            "max_concurrency_form": max_concurrency_form
            or MaxConcurrencyForm(initial={"max_concurrency": view["config"]["max_concurrency"]}),
            "shard_count_form": shard_count_form
            or ShardCountForm(initial={"shard_count": view["topology"]["shard_count"]}),
            "retention": retention,
            "retention_form": retention_form or RetentionForm(initial=retention),
        }
        return self._render(
            request,
            "admin_ui/group_actions.html",
            context,
            stream_prefix,
            consumer_group,
            status=400 if invalid else 200,
        )

    # -- actions (POST only)

    def set_max_concurrency_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        access.raise_unless_can_manage(request.user)
        form = MaxConcurrencyForm(request.POST)
        if not form.is_valid():
            return self.actions_view(request, stream_prefix, consumer_group, max_concurrency_form=form)
        value = form.cleaned_data["max_concurrency"]
        view = _act(request, operations.set_max_concurrency, stream_prefix, consumer_group, value)
        if view is not None:
            messages.success(
                request,
                f"max_concurrency of {stream_prefix}/{consumer_group} set to {value}; group epoch is now "
                f"{view['group_epoch']}.",
            )
        return to_detail(stream_prefix, consumer_group)

    def change_shard_count_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        """Reshards the whole stream prefix (every group of it); requested from one group's page."""
        access.raise_unless_can_manage(request.user)
        form = ShardCountForm(request.POST)
        if not form.is_valid():
            return self.actions_view(request, stream_prefix, consumer_group, shard_count_form=form)
        shard_count, ordering = form.cleaned_data["shard_count"], form.ordering_mode()
        if request.POST.get("confirm") != "yes":
            return self._confirm_shard_count(request, stream_prefix, consumer_group, form)
        after = _act(
            request,
            operations.change_shard_count,
            stream_prefix,
            shard_count,
            ordering,
            consumer_group=consumer_group,
            expected_version=form.cleaned_data["from_version"],
        )
        if after is not None:
            topology, migration = after["topology"], after["migration"]
            from_version = migration["from_version"]
            from_count = next(v["shard_count"] for v in topology["versions"] if v["version"] == from_version)
            messages.success(
                request,
                f"Shard-count change started on stream prefix {stream_prefix}: v{from_version} "
                f"({from_count} shards) → v{topology['active_version']} ({shard_count} shards), "
                f"{ordering.value} ordering. Groups draining v{from_version}: {', '.join(after['groups'])}.",
            )
        return to_detail(stream_prefix, consumer_group)

    def _confirm_shard_count(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, form: ShardCountForm
    ) -> HttpResponse:
        try:
            prefix_view = get_store().describe_prefix(stream_prefix)
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return to_detail(stream_prefix, consumer_group)
        shard_count = form.cleaned_data["shard_count"]
        context = {
            "title": f"Change the shard count of stream prefix {stream_prefix}?",
            "prefix_view": prefix_view,
            "shard_count": shard_count,
            "ordering": form.cleaned_data["ordering"],
            "from_version": prefix_view["topology"]["active_version"],
            "dependencies": presenters.strict_dependencies(prefix_view["topology"], shard_count),
        }
        return self._render(
            request, "admin_ui/confirm_shard_count.html", context, stream_prefix, consumer_group
        )

    def delete_group_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        """First POST: the confirmation, with the group's lag and pending totals (a force checkbox when
        either is above 0). ``confirm=yes``: delete through the operations layer, which refuses
        (GROUP_HAS_UNCONSUMED_ENTRIES) while entries remain and force was not ticked."""
        access.raise_unless_can_manage(request.user)
        if request.POST.get("confirm") != "yes":
            return self._confirm_delete_group(request, stream_prefix, consumer_group)
        force = request.POST.get("force") in ("on", "true", "yes")
        result = _act(request, operations.delete_group, stream_prefix, consumer_group, force=force)
        if result is None:
            return to_detail(stream_prefix, consumer_group)
        messages.success(request, f"Consumer group {stream_prefix}/{consumer_group} deleted.")
        return redirect("admin:admin_ui_consumergroup_changelist")

    def _confirm_delete_group(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        try:
            store = get_store()
            view = store.describe_group(stream_prefix, consumer_group)
            unconsumed = unconsumed_totals_of(view["backlog"])  # the view's rows: no second scan
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return to_detail(stream_prefix, consumer_group)
        context = {
            "title": f"Delete consumer group {consumer_group} of {stream_prefix}?",
            "view": view,
            "live_members": [m for m in view["members"] if presenters.is_live(m)],
            "unconsumed": unconsumed,
            "needs_force": unconsumed["lag"] > 0 or unconsumed["pending"] > 0,
        }
        return self._render(request, "admin_ui/confirm_delete.html", context, stream_prefix, consumer_group)

    # -- helpers

    def _render(
        self,
        request: HttpRequest,
        template: str,
        context: dict[str, Any],
        stream_prefix: str = "",
        consumer_group: str = "",
        status: int = 200,
    ) -> TemplateResponse:
        full = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "stream_prefix": stream_prefix,
            "consumer_group": consumer_group,
            **context,
        }
        return TemplateResponse(request, template, full, status=status)

    def _error_page(
        self,
        request: HttpRequest,
        error: CoordinatorError,
        title: str,
        stream_prefix: str = "",
        group: str = "",
    ) -> TemplateResponse:
        context = {
            "title": title,
            "error": error,
            "error_text": error_text(error),
            "transient": is_transient(error),
            "refresh_s": refresh(request) if is_transient(error) else None,
        }
        status = HTTP_STATUS.get(error.code, (500, ""))[0]
        return self._render(request, "admin_ui/error.html", context, stream_prefix, group, status=status)

    def _audit_url(self, request: HttpRequest, stream_prefix: str, consumer_group: str) -> str | None:
        if not request.user.has_perm("admin_ui.view_auditentry"):
            return None
        # The group's rows and its stream prefix's changes (a reshard, from any page or the API; retention;
        # deleting the prefix): AuditEntryAdmin's GroupWithPrefixChanges filter.
        group_parameter = GroupWithPrefixChanges.parameter_name
        query = urlencode({"stream_prefix": stream_prefix, group_parameter: consumer_group})
        return f"{reverse('admin:admin_ui_auditentry_changelist')}?{query}"


def _describe_prefix_or_none(store: MetadataStore, stream_prefix: str) -> dict[str, Any] | None:
    try:
        return store.describe_prefix(stream_prefix)
    except StreamPrefixNotFound:
        return None  # deleted between the two reads


def _backlog_or_none(store: MetadataStore, stream_prefix: str, group: str) -> list[dict[str, Any]] | None:
    try:
        return store.backlog(stream_prefix, group)
    except (GroupNotFound, StreamPrefixNotFound):
        return None  # deleted since the listing


def _naming_the_permission(model_admin: admin.ModelAdmin, view: Callable[..., Any]) -> Callable[..., Any]:
    """``view``, answering :class:`access.MissingPermission` with a 403 page that names the permission
    (Django's own 403 is a bare "403 Forbidden" that tells the operator nothing)."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        try:
            return view(request, *args, **kwargs)
        except access.MissingPermission as e:
            return _forbidden(model_admin, request, e)

    return wrapper


def _forbidden(
    model_admin: admin.ModelAdmin, request: HttpRequest, error: access.MissingPermission
) -> TemplateResponse:
    app_label, codename = error.permission.split(".", 1)
    name = (
        Permission.objects.filter(content_type__app_label=app_label, codename=codename)
        .values_list("name", flat=True)
        .first()
    )
    context = {
        **model_admin.admin_site.each_context(request),
        "opts": model_admin.opts,
        "app_label": model_admin.opts.app_label,
        "title": "Permission needed",
        "error": error,
        "permission_name": name,
    }
    return TemplateResponse(request, "admin_ui/forbidden.html", context, status=403)


class GroupWithPrefixChanges(admin.SimpleListFilter):
    """``?group=<name>``: the group's own rows and the changes of its whole stream prefix (a shard-count
    change, from whichever page or the API; its retention policy; deleting it), which concern every
    group of the prefix but name another group or none. The group page's audit link uses it, with
    ``stream_prefix``."""

    title = "consumer group, with its stream prefix's changes"
    parameter_name = "group"
    PREFIX_ACTIONS = (
        AuditEntry.Action.CHANGE_SHARD_COUNT,
        AuditEntry.Action.SET_RETENTION,
        AuditEntry.Action.DELETE_PREFIX,
    )

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        # Only the requested group: the filter applies when it has a choice to show.
        value = self.value()
        return [(value, value)] if value else []

    def queryset(self, request: HttpRequest, queryset: QuerySet[AuditEntry]) -> QuerySet[AuditEntry]:
        value = self.value()
        if not value:
            return queryset
        return queryset.filter(Q(consumer_group=value) | Q(action__in=self.PREFIX_ACTIONS))


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Read-only: the trail is written by the operator pages, the API and commands (``source``), and never
    edited or deleted here (``manage.py prune_audit`` applies its retention).

    The details column wraps, and a long one (a skip lists every entry's fields) shows its first line
    with the whole JSON, indented, one click away: nothing is cut off at the table's edge."""

    VIEW_PERMISSION = "admin_ui.view_auditentry"

    list_display = (
        "timestamp",
        "username",
        "source",
        "action",
        "stream_prefix",
        "consumer_group",
        "outcome_column",
        "details_column",
    )
    list_filter = ("action", "outcome", "source", "stream_prefix", GroupWithPrefixChanges)
    search_fields = ("username", "stream_prefix", "consumer_group", "message")
    date_hierarchy = "timestamp"
    readonly_fields = (
        "timestamp",
        "user",
        "username",
        "source",
        "action",
        "stream_prefix",
        "consumer_group",
        "details",
        "outcome",
        "message",
    )

    @admin.display(description="outcome", ordering="outcome")
    def outcome_column(self, entry: AuditEntry) -> SafeString:
        return presenters.breakable_code(entry.outcome)

    @admin.display(description="details")
    def details_column(self, entry: AuditEntry) -> SafeString:
        return presenters.audit_details_html(entry.details, entry.message)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            return self._missing_view_permission(request)
        return super().changelist_view(request, extra_context)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            return self._missing_view_permission(request)
        return super().change_view(request, object_id, form_url, extra_context)

    def _missing_view_permission(self, request: HttpRequest) -> HttpResponse:
        error = access.MissingPermission(self.VIEW_PERMISSION, "viewing the audit trail")
        return _forbidden(self, request, error)
