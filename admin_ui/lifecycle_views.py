"""Operator pages for the lifecycle of entries (docs/operations.md): a shard's backlog, skip and
redeliver, releasing a group from a migration's drain, dead letters, and a stream prefix's retention and
deletion.

Theory of operation
-------------------
A mixin of ``ConsumerGroupAdmin`` (admin_ui/admin.py), which supplies ``_render`` and ``_error_page``
and wraps every URL below in ``admin_site.admin_view``. Under ``<admin>/admin_ui/consumergroup/``:

===============================================  =====  ==============================================
``<P>/<G>/shards/<shard>/``                        GET    a shard's backlog, oldest pending, the forms
``<P>/<G>/shards/<shard>/redeliver/``              POST   the owner re-reads its pending entries
``<P>/<G>/shards/<shard>/skip/``                   POST   confirm page listing the entries, then skip
``<P>/<G>/release-drain/``                         POST   confirm page (unconsumed count), then release
``<P>/<G>/dead-letters/``                          GET    the group's dead letters, paged by ``after``
``<P>/<G>/dead-letters/<id>/``                     GET    one dead letter, every field
``<P>/<G>/dead-letters/replay/``                   POST   replay the selected ones
``<P>/<G>/dead-letters/purge/``                    POST   confirm page with a reason, then purge
``<P>/<G>/retention/``                             POST   set the prefix's retention policy
``<P>/<G>/delete-prefix/``                         POST   confirm page (what is left), then delete
===============================================  =====  ==============================================

The prefix-wide actions are requested from a group's page (like the shard-count change) so that the
operator lands back on it. Reading for display goes through the store (``describe_group``,
``dead_letters``, ``prefix_usage``, ``unconsumed_for_release``, ``pending_entries``: the skip's own
selection, run read-only, so a confirmation lists exactly what the skip would take). Every change goes
through ONE function of :mod:`coordinator.operations`, which authorizes, writes the audit row first
(fail closed), acts and records the outcome: these views never write the audit trail themselves, so
the pages and the Admin API cannot audit differently.

Pages need ``admin_ui.view_groups``, the forms and actions ``coordinator.manage_groups``; every action
is ``require_POST`` and CSRF-protected, and a destructive one answers its first POST with a
confirmation page that posts again with ``confirm=yes``. A :class:`CoordinatorError` becomes an admin
error message (or an error page when nothing can be drawn), never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import URLPattern, path
from django.views.decorators.http import require_POST

from coordinator import operations
from coordinator.protocol.errors import CoordinatorError, GroupNotFound, InvalidRequest, ShardNotFound
from coordinator.protocol.model import ENTRY_ID_RE, MAX_ENTRY_IDS, RetentionPolicy
from coordinator.store import get_store

from . import access, presenters
from .forms import (
    DeadLetterPurgeForm,
    DeadLetterReplayForm,
    DeletePrefixForm,
    RedeliverForm,
    ReleaseDrainForm,
    RetentionForm,
    SkipForm,
)
from .pages import error_text, to_detail

# Dead letters per page; pending entries shown on a shard's page (the skip form lists them all).
DEAD_LETTERS_PER_PAGE = 50
PENDING_SHOWN = 20


def _to_dead_letters(stream_prefix: str, consumer_group: str) -> HttpResponseRedirect:
    return redirect("admin:admin_ui_dead_letters", stream_prefix=stream_prefix, consumer_group=consumer_group)


def _to_shard(stream_prefix: str, consumer_group: str, shard: str) -> HttpResponseRedirect:
    return redirect(
        "admin:admin_ui_shard", stream_prefix=stream_prefix, consumer_group=consumer_group, shard=shard
    )


def _some(ids: list[str], shown: int = 10) -> str:
    """``a, b, c`` or ``a, b, ... and 990 more``: a message stays readable whatever the count."""
    more = len(ids) - shown
    return ", ".join(ids[:shown]) + (f" and {more} more" if more > 0 else "") if ids else "none"


def _plural(n: int, word: str, plural: str | None = None) -> str:
    return f"{n} {word if n == 1 else (plural or word + 's')}"


class LifecycleViews:
    """Views of the entry lifecycle; mixed into ``ConsumerGroupAdmin``."""

    # Supplied by ConsumerGroupAdmin.
    _render: Any
    _error_page: Any
    actions_view: Any

    def lifecycle_urls(self, wrap: Any) -> list[URLPattern]:
        group = "<str:stream_prefix>/<str:consumer_group>/"
        shard = f"{group}shards/<str:shard>/"
        dead = f"{group}dead-letters/"

        def post(view: Any) -> Any:
            return wrap(require_POST(view))

        return [
            path(shard, wrap(self.shard_view), name="admin_ui_shard"),
            path(f"{shard}redeliver/", post(self.redeliver_view), name="admin_ui_redeliver"),
            path(f"{shard}skip/", post(self.skip_view), name="admin_ui_skip_entries"),
            path(f"{group}release-drain/", post(self.release_drain_view), name="admin_ui_release_drain"),
            # replay/ and purge/ before <id>/: a GET of them is then a 405, not "no such dead letter".
            path(f"{dead}replay/", post(self.replay_view), name="admin_ui_replay_dead_letters"),
            path(f"{dead}purge/", post(self.purge_view), name="admin_ui_purge_dead_letters"),
            path(dead, wrap(self.dead_letters_view), name="admin_ui_dead_letters"),
            path(f"{dead}<str:dlq_id>/", wrap(self.dead_letter_view), name="admin_ui_dead_letter"),
            path(f"{group}retention/", post(self.set_retention_view), name="admin_ui_set_retention"),
            path(f"{group}delete-prefix/", post(self.delete_prefix_view), name="admin_ui_delete_prefix"),
        ]

    # ------------------------------------------------------------------------------------- one shard

    def shard_view(
        self,
        request: HttpRequest,
        stream_prefix: str,
        consumer_group: str,
        shard: str,
        *,
        redeliver_form: RedeliverForm | None = None,
        skip_form: SkipForm | None = None,
    ) -> HttpResponse:
        """A shard's backlog figures, its oldest pending entries and the two forms (no auto-refresh to
        type into); re-rendered (400) with a form's errors when a POST does not validate."""
        access.raise_unless_can_manage(request.user)
        try:
            store = get_store()
            view = store.describe_group(stream_prefix, consumer_group)
            row = _backlog_row(view, shard)
            pending = store.pending_entries(stream_prefix, consumer_group, shard, limit=PENDING_SHOWN)
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return to_detail(stream_prefix, consumer_group)
        context = {
            "title": f"Shard {shard}: {stream_prefix} / {consumer_group}",
            "shard": shard,
            "row": row,
            "pending": presenters.pending_rows(pending["entries"]),
            "pending_shown": PENDING_SHOWN,
            "redeliver_form": redeliver_form or RedeliverForm(),
            "skip_form": skip_form or SkipForm(),
        }
        status = 400 if redeliver_form is not None or skip_form is not None else 200
        return self._render(
            request, "admin_ui/shard.html", context, stream_prefix, consumer_group, status=status
        )

    def redeliver_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, shard: str
    ) -> HttpResponse:
        access.raise_unless_can_manage(request.user)
        form = RedeliverForm(request.POST)
        if not form.is_valid():
            return self.shard_view(request, stream_prefix, consumer_group, shard, redeliver_form=form)
        result = _act(
            request,
            operations.redeliver,
            stream_prefix,
            consumer_group,
            shard,
            reason=form.cleaned_data["reason"],
        )
        if result is None:
            return to_detail(stream_prefix, consumer_group)
        who = (
            f"its owner {result['owner']} re-reads"
            if result["owner"]
            else "nobody owns it right now; its next owner reads"
        )
        messages.success(
            request,
            f"Redelivery requested on shard {shard} of {stream_prefix}/{consumer_group}: {who} its pending "
            f"entries before anything new (redeliver token {result['redeliver_token']}).",
        )
        return to_detail(stream_prefix, consumer_group)

    def skip_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, shard: str
    ) -> HttpResponse:
        """First POST: the entries that would be skipped. ``confirm=yes``: skip exactly those ids."""
        access.raise_unless_can_manage(request.user)
        form = SkipForm(request.POST)
        if not form.is_valid():
            return self.shard_view(request, stream_prefix, consumer_group, shard, skip_form=form)
        ids, older_than_s = form.cleaned_data["entry_ids"], form.cleaned_data["older_than_s"]
        if request.POST.get("confirm") != "yes":
            return self._confirm_skip(request, stream_prefix, consumer_group, shard, form)
        result = _act(
            request,
            operations.skip_entries,
            stream_prefix,
            consumer_group,
            shard,
            entry_ids=ids or None,
            older_than_ms=None if ids else older_than_s * 1000,
            reason=form.cleaned_data["reason"],
        )
        if result is None:
            return to_detail(stream_prefix, consumer_group)
        skipped = [s["id"] for s in result["skipped"]]
        messages.success(
            request,
            f"Skipped {_plural(len(skipped), 'entry', 'entries')} of shard {shard} of "
            f"{stream_prefix}/{consumer_group} (acknowledged without being handled; each one's fields are "
            f"in the audit trail): {_some(skipped)}.",
        )
        return to_detail(stream_prefix, consumer_group)

    def _confirm_skip(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, shard: str, form: SkipForm
    ) -> HttpResponse:
        ids, older_than_s = form.cleaned_data["entry_ids"], form.cleaned_data["older_than_s"]
        try:
            selection = get_store().pending_entries(
                stream_prefix,
                consumer_group,
                shard,
                entry_ids=ids or None,
                older_than_ms=None if ids else older_than_s * 1000,
                limit=MAX_ENTRY_IDS,
            )
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return to_detail(stream_prefix, consumer_group)
        found, missing = selection["entries"], selection["not_pending"]
        if missing:
            form.add_error("entry_ids", f"Not pending for this group on {shard}: {', '.join(missing)}.")
            return self.shard_view(request, stream_prefix, consumer_group, shard, skip_form=form)
        if not found:
            messages.info(
                request, f"No pending entry of shard {shard} is {older_than_s} s old: nothing to skip."
            )
            return _to_shard(stream_prefix, consumer_group, shard)
        context = {
            "title": f"Skip {_plural(len(found), 'entry', 'entries')} of shard {shard}?",
            "shard": shard,
            "entries": presenters.pending_rows(found),
            "entry_ids": " ".join(e["id"] for e in found),
            "reason": form.cleaned_data["reason"],
            "older_than_s": None if ids else older_than_s,
            "truncated": not ids and len(found) >= MAX_ENTRY_IDS,
        }
        return self._render(request, "admin_ui/confirm_skip.html", context, stream_prefix, consumer_group)

    # ------------------------------------------------------------------------------------- release drain

    def release_drain_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        """First POST: how many entries the group has not consumed, and a reason. ``confirm=yes``:
        release the group with that count (the store refuses if it has changed)."""
        access.raise_unless_can_manage(request.user)
        form = ReleaseDrainForm(request.POST) if request.POST.get("confirm") == "yes" else None
        if form is None or not form.is_valid():
            return self._confirm_release_drain(request, stream_prefix, consumer_group, form)
        result = _act(
            request,
            operations.release_drain,
            stream_prefix,
            consumer_group,
            confirm_unconsumed=form.cleaned_data["confirm_unconsumed"],
            reason=form.cleaned_data["reason"],
        )
        if result is None:
            return to_detail(stream_prefix, consumer_group)
        messages.success(
            request,
            f"Group {consumer_group} released from the drain of stream prefix {stream_prefix}: "
            f"{', '.join(result['released'])} count as drained for it; "
            f"{_plural(result['unconsumed_entries'], 'unconsumed entry', 'unconsumed entries')} "
            "will not be handled by this group.",
        )
        return to_detail(stream_prefix, consumer_group)

    def _confirm_release_drain(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, form: ReleaseDrainForm | None
    ) -> HttpResponse:
        try:
            store = get_store()
            view = store.describe_group(stream_prefix, consumer_group)
            unconsumed = store.unconsumed_for_release(stream_prefix, consumer_group)
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return to_detail(stream_prefix, consumer_group)
        if form is not None:
            # Re-shown for its errors: with the count as it is now, which is the one the page shows.
            data = request.POST.copy()
            data["confirm_unconsumed"] = str(unconsumed)
            form = ReleaseDrainForm(data)
            form.is_valid()
        context = {
            "title": f"Release group {consumer_group} from the drain?",
            "view": view,
            "undrained": presenters.undrained_rows(view),
            "unconsumed": unconsumed,
            "form": form or ReleaseDrainForm(initial={"confirm_unconsumed": unconsumed}),
        }
        return self._render(
            request,
            "admin_ui/confirm_release_drain.html",
            context,
            stream_prefix,
            consumer_group,
            status=400 if form is not None else 200,
        )

    # ------------------------------------------------------------------------------------- dead letters

    def dead_letters_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        access.raise_unless_can_view(request.user)
        after = request.GET.get("after", "-")
        if after != "-" and not ENTRY_ID_RE.fullmatch(after):
            messages.error(
                request, f"'after' must be a dead letter's id (like 1700000000000-0); got {after!r}."
            )
            return _to_dead_letters(stream_prefix, consumer_group)
        try:
            page = get_store().dead_letters(
                stream_prefix, consumer_group, after=after, count=DEAD_LETTERS_PER_PAGE
            )
        except (GroupNotFound, InvalidRequest) as e:
            messages.error(request, error_text(e))
            return redirect("admin:admin_ui_consumergroup_changelist")
        except CoordinatorError as e:
            return self._error_page(request, e, f"Dead letters: {stream_prefix} / {consumer_group}")
        rows = [presenters.dead_letter_row(dl) for dl in page["entries"]]
        context = {
            "title": f"Dead letters: {stream_prefix} / {consumer_group}",
            "page": page,
            "rows": rows,
            "first_page": after == "-",
            "next_after": rows[-1]["id"] if len(rows) == DEAD_LETTERS_PER_PAGE else None,
            "can_manage": access.can_manage(request.user),
        }
        return self._render(request, "admin_ui/dead_letters.html", context, stream_prefix, consumer_group)

    def dead_letter_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, dlq_id: str
    ) -> HttpResponse:
        access.raise_unless_can_view(request.user)
        try:
            if not ENTRY_ID_RE.fullmatch(dlq_id):
                raise InvalidRequest(f"a dead letter's id is written like 1700000000000-0; got {dlq_id!r}")
            dl = get_store().dead_letter(stream_prefix, consumer_group, dlq_id)
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return _to_dead_letters(stream_prefix, consumer_group)
        context = {
            "title": f"Dead letter {dlq_id}",
            "dl": presenters.dead_letter_row(dl),
            "can_manage": access.can_manage(request.user),
        }
        return self._render(request, "admin_ui/dead_letter.html", context, stream_prefix, consumer_group)

    def replay_view(self, request: HttpRequest, stream_prefix: str, consumer_group: str) -> HttpResponse:
        access.raise_unless_can_manage(request.user)
        form = DeadLetterReplayForm(request.POST)
        if not form.is_valid():
            messages.error(request, _form_errors(form))
            return _to_dead_letters(stream_prefix, consumer_group)
        result = _act(
            request,
            operations.replay_dead_letters,
            stream_prefix,
            consumer_group,
            form.cleaned_data["ids"],
            reason=form.cleaned_data["reason"],
            accept_unsigned=form.cleaned_data["accept_unsigned"],
        )
        if result is None:
            return _to_dead_letters(stream_prefix, consumer_group)
        replayed = result["replayed"]
        messages.success(
            request,
            f"Replayed {_plural(len(replayed), 'dead letter')} into the active version (every group of "
            f"{stream_prefix} receives {'it' if len(replayed) == 1 else 'them'} again): "
            + ", ".join(f"{r['id']} → {r['shard']} {r['entry_id']}" for r in replayed)
            + ".",
        )
        return _to_dead_letters(stream_prefix, consumer_group)

    def purge_view(self, request: HttpRequest, stream_prefix: str, consumer_group: str) -> HttpResponse:
        """First POST (from the list): a confirmation asking for a reason. ``confirm=yes``: purge."""
        access.raise_unless_can_manage(request.user)
        confirming = request.POST.get("confirm") == "yes"
        form = DeadLetterPurgeForm(request.POST, confirming=confirming)
        if not form.is_valid() and set(form.errors) != {"reason"}:
            messages.error(request, _form_errors(form))  # nothing (valid) selected
            return _to_dead_letters(stream_prefix, consumer_group)
        if not confirming or form.errors:
            return self._confirm_purge(request, stream_prefix, consumer_group, form)
        result = _act(
            request,
            operations.purge_dead_letters,
            stream_prefix,
            consumer_group,
            form.selection(),
            reason=form.cleaned_data["reason"],
        )
        if result is None:
            return _to_dead_letters(stream_prefix, consumer_group)
        messages.success(
            request,
            f"Purged {_plural(result['purged'], 'dead letter')} of {stream_prefix}/{consumer_group}.",
        )
        return _to_dead_letters(stream_prefix, consumer_group)

    def _confirm_purge(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, form: DeadLetterPurgeForm
    ) -> HttpResponse:
        try:
            length = get_store().dead_letters(stream_prefix, consumer_group, count=1)["length"]
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return _to_dead_letters(stream_prefix, consumer_group)
        context = {
            "title": f"Purge dead letters of {stream_prefix} / {consumer_group}?",
            "ids": form.selection(),
            "length": length,
            "form": form,
        }
        return self._render(
            request,
            "admin_ui/confirm_purge_dead_letters.html",
            context,
            stream_prefix,
            consumer_group,
            status=400 if form.errors else 200,
        )

    # ------------------------------------------------------------------------------------- stream prefix

    def set_retention_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        """The form is on the actions page, which is shown again (400) with its errors."""
        access.raise_unless_can_manage(request.user)
        form = RetentionForm(request.POST)
        try:
            policy = form.policy() if form.is_valid() else None
        except InvalidRequest as e:  # the core's bounds, should the form's ever drift from them
            form.add_error(None, e.message)
            policy = None
        if policy is None:
            return self.actions_view(request, stream_prefix, consumer_group, retention_form=form)
        done = _act(
            request,
            operations.set_retention,
            stream_prefix,
            policy,
            reason=form.cleaned_data["reason"],
        )
        if done is None:
            return to_detail(stream_prefix, consumer_group)
        messages.success(request, f"Retention of stream prefix {stream_prefix} set: {_policy_text(policy)}.")
        return to_detail(stream_prefix, consumer_group)

    def delete_prefix_view(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str
    ) -> HttpResponse:
        """First POST: what the prefix still holds. ``confirm=yes``: delete it (``force`` needed, and
        checked here first, when it still has groups or unconsumed entries)."""
        access.raise_unless_can_manage(request.user)
        confirming = request.POST.get("confirm") == "yes"
        form = DeletePrefixForm(request.POST if confirming else None)
        if confirming and form.is_valid() and not form.cleaned_data["force"]:
            try:
                usage = get_store().prefix_usage(stream_prefix)
            except CoordinatorError as e:
                messages.error(request, error_text(e))
                return to_detail(stream_prefix, consumer_group)
            if _in_use(usage):
                form.add_error(
                    "force", "The prefix still has groups or unconsumed entries: tick to delete anyway."
                )
        if not confirming or not form.is_valid():
            return self._confirm_delete_prefix(request, stream_prefix, consumer_group, form)
        result = _act(
            request,
            operations.delete_prefix,
            stream_prefix,
            force=form.cleaned_data["force"],
            reason=form.cleaned_data["reason"],
        )
        if result is None:
            return to_detail(stream_prefix, consumer_group)
        messages.success(
            request,
            f"Stream prefix {stream_prefix} deleted with its groups, streams and dead letters "
            f"({_plural(result['deleted_keys'], 'Redis key')}).",
        )
        return redirect("admin:admin_ui_consumergroup_changelist")

    def _confirm_delete_prefix(
        self, request: HttpRequest, stream_prefix: str, consumer_group: str, form: DeletePrefixForm
    ) -> HttpResponse:
        try:
            usage = get_store().prefix_usage(stream_prefix)
        except CoordinatorError as e:
            messages.error(request, error_text(e))
            return to_detail(stream_prefix, consumer_group)
        context = {
            "title": f"Delete stream prefix {stream_prefix}?",
            "usage": usage,
            "in_use": _in_use(usage),
            "form": form,
        }
        return self._render(
            request,
            "admin_ui/confirm_delete_prefix.html",
            context,
            stream_prefix,
            consumer_group,
            status=400 if form.is_bound else 200,
        )


def actor_from_admin_request(request: Any) -> operations.Actor:
    """A Django admin request: admin if the user may manage groups (admin_ui/access.py)."""
    user: Any = request.user
    return operations.Actor.of_user(user, source=operations.Source.ADMIN_UI, is_admin=access.can_manage(user))


def _act(request: HttpRequest, action: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> Any:
    """Make one change through ``action`` of :mod:`coordinator.operations` as the request's user (it
    authorizes, audits and acts); returns its result, or None when it was refused, the reason having
    become the page's error message."""
    try:
        return action(actor_from_admin_request(request), *args, **kwargs)
    except CoordinatorError as e:
        messages.error(request, error_text(e))
        return None


def _backlog_row(view: dict[str, Any], shard: str) -> dict[str, Any]:
    """The shard's row of the group's backlog; SHARD_NOT_FOUND if it is not a non-retired shard."""
    for row in presenters.backlog_rows(view):
        if row["shard"] == shard:
            return row
    raise ShardNotFound(
        f"shard {shard!r} is not a shard of a live (active or draining) version of stream prefix "
        f"{view['stream_prefix']!r}",
        shard=shard,
    )


def _policy_text(policy: RetentionPolicy) -> str:
    named = (("max_age_ms", policy.max_age_ms), ("max_len", policy.max_len))
    caps = [f"{name} {value}" for name, value in named if value is not None]
    return (
        "acknowledged entries are trimmed"
        + (f"; caps {', '.join(caps)} (may drop unconsumed entries: data loss)" if caps else ", no caps")
        + f"; retired versions' streams kept {presenters.duration(policy.retired_grace_ms)} after retiring"
    )


def _in_use(usage: dict[str, Any]) -> bool:
    return bool(usage["groups"] or usage["unconsumed_entries"])


def _form_errors(form: Any) -> str:
    return " ".join(str(m) for errors in form.errors.values() for m in errors)
