"""Operator actions on entries, migrations and stream prefixes: one function per action, and the one door
through which the HTTP API, the operator pages and management commands make them.

Theory of operation
-------------------
Every action takes the same steps, in this order, and the order is the point:

1. **Authorize.** The caller's adapter (``actor_from_api_request`` in coordinator/api/views.py,
   ``actor_from_admin_request`` in admin_ui/lifecycle_views.py, :func:`actor_from_command` here for the
   management commands) turns its request into an :class:`Actor` and decides ``is_admin`` by its own
   rules (an admin credential or staff session for the API, ``coordinator.manage_groups`` for the
   pages). An actor that is not an admin gets :class:`PermissionDeniedError`; nothing is written,
   nothing is changed.
2. **Validate.** Identifiers, the shard, entry ids, the reason and the cross-field rules, here, so that
   every entry point applies the same rules (the API's serializers call these validators to report
   per-field errors; the entry-id rule is the store's own). A malformed request raises
   ``InvalidRequest`` before any audit row: it is not an attempted change, and a row must never be
   refused by the database for a value it cannot hold.
3. **Audit first.** An ``AuditEntry`` with the outcome ``pending`` is committed, in its own transaction,
   *before* the store is touched. If that write fails, :class:`AuditUnavailable` (503, retriable) and
   the store is never called: we fail closed, because an operator action that leaves no trace (a skip
   that acknowledged entries nobody handled) is worse than one that waits for the database to return.
4. **Act, then record.** The store call (``coordinator.store.get_store()``; the store enforces the
   protocol's rules atomically in Redis), preceded for some actions by a read of what the record should
   keep (the previous retention policy, the prefix's usage). The outcome replaces ``pending``: ``ok`` or
   the error's code,
   with the message and the details an operator needs afterwards (a skip's entries with their fields, a
   release's abandoned count, a deleted prefix's usage). If recording the outcome fails, the change has
   already happened: the failure is logged and the result returned, and the row stays ``pending``,
   which reads as "may have happened". Failing the request instead would invite a retry of an action
   that was done.

Why one place: before this module the API views and the operator pages each called the store, and only
the pages audited: one rule written twice, which drifts. Now views, pages and commands stay thin and
cannot disagree about who may act, what is valid, or what is recorded. Reads (listings, backlog, the
usage a confirmation shows) are not actions; callers read the store directly.

API credentials take the same steps (:func:`issue_credential`, :func:`change_credential`): issuing one,
re-activating one and changing its role or scope give a token power, so they need the admin role
(``coordinator.manage_groups`` for a staff user, as creating a group does; the ``create_api_credential``
command acts as an admin); deactivating one takes power away, so an actor that may change credentials
(``change_apicredential`` in the Django admin: ``may_deactivate_credentials``) may do that alone. The
audit row (empty ``stream_prefix``, the credential's name and id in its details, never a token) is
committed before the credential row is saved; if it cannot be, nothing is saved. Their entry points:
the credential admin (coordinator/admin.py) and the command.

``prune_audit`` applies the audit trail's retention (``RSC_AUDIT_RETENTION_DAYS``, default 365); the
``prune_audit`` command and the retention beat task call it.
"""

from __future__ import annotations

import dataclasses
import getpass
import logging
import os
from collections.abc import Callable
from datetime import timedelta
from enum import StrEnum
from typing import Any, TypeVar

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import DatabaseError
from django.utils import timezone

from coordinator import audit, conf
from coordinator.models import ANY, ApiCredential, AuditEntry, parse_patterns
from coordinator.protocol.commands import CreateGroup
from coordinator.protocol.errors import (
    ConfirmationMismatch,
    CoordinatorError,
    GroupHasUnconsumedEntries,
    InvalidRequest,
)
from coordinator.protocol.limits import require_lease_above_tick
from coordinator.protocol.model import (
    MAX_ENTRY_IDS,
    MAX_RETENTION_MS,
    OrderingMode,
    RetentionPolicy,
    Shard,
    require_int_in_range,
    validate_entry_ids,
    validate_identifier,
)
from coordinator.store import MetadataStore, get_store
from coordinator.store.operator_scripts import load_group

log = logging.getLogger(__name__)

Action = AuditEntry.Action
Source = AuditEntry.Source

MAX_REASON_CHARS = 500
MAX_IDS = MAX_ENTRY_IDS  # entry ids of one skip, dead-letter ids of one replay or purge (1000)
MAX_SKIP_AGE_MS = MAX_RETENTION_MS  # one year, like the store's bound for older_than_ms
MAX_CONFIRM_UNCONSUMED = 2**53  # the largest integer every JSON implementation represents exactly


# ------------------------------------------------------------------------------------------ errors


class OperationErrorCode(StrEnum):
    """The codes of this layer's own errors (the core's are ``ErrorCode``). They carry no HTTP status:
    coordinator/api/errors.py maps every code to one."""

    PERMISSION_DENIED = "PERMISSION_DENIED"
    # The audit row of an operator action could not be written, so the action was not made (fail
    # closed). Retriable: the database is usually back within seconds.
    AUDIT_UNAVAILABLE = "AUDIT_UNAVAILABLE"
    # An unexpected failure (a bug): the audit outcome of such an action, and the API's 500.
    INTERNAL_ERROR = "INTERNAL_ERROR"


class PermissionDeniedError(CoordinatorError):
    """The actor may not make operator changes."""

    code = OperationErrorCode.PERMISSION_DENIED


class AuditUnavailable(CoordinatorError):
    """The audit row could not be written, so nothing was changed (retriable)."""

    code = OperationErrorCode.AUDIT_UNAVAILABLE
    retriable = True


# ------------------------------------------------------------------------------------------ actors


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Actor:
    """Who acts. Built by the caller's adapter, which alone decides ``is_admin``."""

    username: str  # a Django username or "credential:<name>" for API tokens; never a token
    user: Any = None  # the Django user, when there is one (AuditEntry.user)
    source: str  # "api" | "admin_ui" | "command"
    is_admin: bool
    # May deactivate API credentials without being an admin (the credential admin's adapter: a staff user
    # with change_apicredential). Taking a token's power away needs no more; giving any needs is_admin.
    may_deactivate_credentials: bool = False

    @classmethod
    def of_user(
        cls, user: Any, *, source: str, is_admin: bool, may_deactivate_credentials: bool = False
    ) -> Actor:
        """A Django user (or anonymous) acting through ``source``; the adapter decided ``is_admin``."""
        return cls(
            username=_username(user),
            user=_django_user(user),
            source=source,
            is_admin=is_admin,
            may_deactivate_credentials=may_deactivate_credentials,
        )


def actor_from_command(command: str) -> Actor:
    """A management command (``manage.py consumer_groups ...``, and ``make run`` creating its demo
    group): whoever can run manage.py with the coordinator's settings holds its secrets, so it acts as
    an admin. The audit row names the OS user and the command."""
    return Actor(username=f"command:{command}:{_os_user()}", source=Source.COMMAND, is_admin=True)


def _os_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no user name in the environment and none for the uid (a bare container)
        return f"uid-{os.getuid()}"


def _username(user: Any) -> str:
    return str(user.get_username()) if user is not None and user.is_authenticated else ""


def _django_user(user: Any) -> Any:
    return user if isinstance(user, AbstractBaseUser) and user.is_authenticated else None


# ------------------------------------------------------------------------------------------ validators


def validate_reason(reason: Any, *, required: bool) -> str:
    """The operator's reason, stripped: 1..500 characters where required, at most 500 otherwise."""
    if not isinstance(reason, str):
        raise InvalidRequest("reason must be a string", field="reason")
    if len(reason) > MAX_REASON_CHARS:
        raise InvalidRequest(
            f"reason must be at most {MAX_REASON_CHARS} characters, got {len(reason)}", field="reason"
        )
    reason = reason.strip()
    if required and not reason:
        raise InvalidRequest(
            f"a reason is required for this action (1-{MAX_REASON_CHARS} characters)", field="reason"
        )
    return reason


def validate_entry_id(value: Any, field: str = "entry_id") -> str:
    """A Redis stream entry id ``<ms>-<seq>`` (the protocol core's rule: both parts decimal, below 2**64;
    returned in canonical form)."""
    return validate_entry_ids([value], field)[0]


def _shard(shard: Any) -> str:
    """The shard's wire form; InvalidRequest (field ``shard``) when malformed."""
    try:
        return str(shard if isinstance(shard, Shard) else Shard.parse(shard))
    except InvalidRequest as e:
        raise InvalidRequest(e.message, field="shard") from e


def _group_target(stream_prefix: str, consumer_group: str) -> tuple[str, str]:
    return (
        validate_identifier(stream_prefix, "stream_prefix"),
        validate_identifier(consumer_group, "consumer_group"),
    )


# ------------------------------------------------------------------------------------------ the steps


def raise_unless_admin(actor: Actor, action: AuditEntry.Action) -> None:
    if not actor.is_admin:
        log.warning(
            "%s %s refused: %s is not an admin", actor.source, action.value, actor.username or "anonymous"
        )
        raise PermissionDeniedError(
            f"{action.label} needs the admin role (an admin credential, or a staff user with the "
            f"permission coordinator.manage_groups)",
            action=action.value,
        )


# act(store, details) -> result. It may add to ``details`` before it fails (what it read first).
_Act = Callable[[MetadataStore, dict[str, Any]], dict[str, Any]]
_T = TypeVar("_T")


def _audited(
    actor: Actor,
    action: AuditEntry.Action,
    stream_prefix: str,
    consumer_group: str,
    requested: dict[str, Any],
    act: _Act,
) -> dict[str, Any]:
    """Steps 3 and 4: the pending row, the store call, the outcome."""
    return _audited_change(
        actor, action, stream_prefix, consumer_group, requested, lambda details: act(get_store(), details)
    )


def _audited_change(
    actor: Actor,
    action: AuditEntry.Action,
    stream_prefix: str,
    consumer_group: str,
    requested: dict[str, Any],
    change: Callable[[dict[str, Any]], _T],
) -> _T:
    """Steps 3 and 4 for any change (the store's, a credential's): the pending row, the change, the
    outcome. ``change(details)`` runs only once the row is committed."""
    try:
        entry = audit.begin(
            username=actor.username,
            user=actor.user,
            source=actor.source,
            action=action,
            stream_prefix=stream_prefix,
            consumer_group=consumer_group,
            details=requested,
        )
    except DatabaseError as e:
        log.error("%s %s refused: the audit trail cannot be written", actor.source, action.value, exc_info=e)
        raise AuditUnavailable(
            "the audit trail cannot be written, so nothing was changed; retry shortly",
            action=action.value,
        ) from e
    details = dict(requested)
    try:
        result = change(details)
    except CoordinatorError as e:
        _settle(entry, str(e.code), message=e.message, details={**details, "error": e.details})
        raise
    except Exception as e:  # a bug: recorded as such, then the caller's usual 500
        _settle(entry, OperationErrorCode.INTERNAL_ERROR, message=type(e).__name__, details=details)
        raise
    _settle(entry, AuditEntry.OK, details=details)
    return result


def _settle(entry: AuditEntry, outcome: str, *, message: str = "", details: dict[str, Any]) -> None:
    try:
        audit.settle(entry, str(outcome), message=message, details=details)
    except Exception as e:  # whatever it is, it must not turn a change already made into an error
        # The action has happened (or failed) already; the row stays "pending" = "may have happened".
        log.error(
            "audit entry %s (%s on %s) stays pending: its outcome %s could not be recorded",
            entry.pk,
            entry.action,
            entry.stream_prefix,
            outcome,
            exc_info=e,
        )


# ------------------------------------------------------------------------------------------ actions


def skip_entries(
    actor: Actor,
    stream_prefix: str,
    consumer_group: str,
    shard: str,
    *,
    entry_ids: list[str] | None = None,
    older_than_ms: int | None = None,
    reason: str,
) -> dict[str, Any]:
    """Acknowledge pending entries of one shard without handling them: the listed ids (every one must be
    pending, else nothing is acked) or every pending entry older than ``older_than_ms``. The audit row
    keeps each skipped entry's id, consumer, delivery count and fields."""
    raise_unless_admin(actor, Action.SKIP_ENTRIES)
    prefix, group = _group_target(stream_prefix, consumer_group)
    wire = _shard(shard)
    reason = validate_reason(reason, required=True)
    if (entry_ids is None) == (older_than_ms is None):
        raise InvalidRequest("give exactly one of entry_ids and older_than_ms", field="entry_ids")
    requested: dict[str, Any] = {"shard": wire, "reason": reason}
    if entry_ids is not None:
        requested["entry_ids"] = ids = validate_entry_ids(entry_ids, "entry_ids")
    else:
        requested["older_than_ms"] = require_int_in_range(older_than_ms, "older_than_ms", 0, MAX_SKIP_AGE_MS)
        ids = None

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        result = store.skip_entries(prefix, group, wire, entry_ids=ids, older_than_ms=older_than_ms)
        details["skipped"] = result["skipped"]
        details["count"] = len(result["skipped"])
        return result

    return _audited(actor, Action.SKIP_ENTRIES, prefix, group, requested, act)


def redeliver(
    actor: Actor, stream_prefix: str, consumer_group: str, shard: str, *, reason: str = ""
) -> dict[str, Any]:
    """Ask the shard's owner to re-read its pending entries now (the redeliver token moves on)."""
    raise_unless_admin(actor, Action.REDELIVER)
    prefix, group = _group_target(stream_prefix, consumer_group)
    wire = _shard(shard)
    requested = {"shard": wire, "reason": validate_reason(reason, required=False)}

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        result = store.redeliver(prefix, group, wire)
        details.update(redeliver_token=result["redeliver_token"], owner=result["owner"])
        return result

    return _audited(actor, Action.REDELIVER, prefix, group, requested, act)


def release_drain(
    actor: Actor, stream_prefix: str, consumer_group: str, *, confirm_unconsumed: int, reason: str
) -> dict[str, Any]:
    """Stop waiting for a group without live members in the active migration, abandoning its unconsumed
    entries there; ``confirm_unconsumed`` must equal their current count (what the operator saw)."""
    raise_unless_admin(actor, Action.RELEASE_DRAIN)
    prefix, group = _group_target(stream_prefix, consumer_group)
    confirm = require_int_in_range(confirm_unconsumed, "confirm_unconsumed", 0, MAX_CONFIRM_UNCONSUMED)
    requested = {"confirm_unconsumed": confirm, "reason": validate_reason(reason, required=True)}

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        result = store.release_drain(prefix, group, confirm_unconsumed=confirm)
        details.update(released=result["released"], unconsumed_entries=result["unconsumed_entries"])
        return result

    return _audited(actor, Action.RELEASE_DRAIN, prefix, group, requested, act)


def replay_dead_letters(
    actor: Actor,
    stream_prefix: str,
    consumer_group: str,
    ids: list[str],
    *,
    reason: str = "",
    accept_unsigned: bool = False,
) -> dict[str, Any]:
    """Re-append dead letters to the active version (every group of the prefix sees them again). Only
    those the dead-letter function wrote (``DEAD_LETTER_NOT_VERIFIED`` otherwise), and unsigned ones
    (from before dead letters were signed) only with ``accept_unsigned`` (audited)."""
    raise_unless_admin(actor, Action.REPLAY_DEAD_LETTERS)
    prefix, group = _group_target(stream_prefix, consumer_group)
    dlq_ids = validate_entry_ids(ids, "ids")
    if not isinstance(accept_unsigned, bool):
        raise InvalidRequest("accept_unsigned must be true or false", field="accept_unsigned")
    requested: dict[str, Any] = {"ids": dlq_ids, "reason": validate_reason(reason, required=False)}
    if accept_unsigned:
        requested["accept_unsigned"] = True

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        result = store.replay_dead_letters(prefix, group, dlq_ids, accept_unsigned=accept_unsigned)
        details["replayed"] = result["replayed"]
        return result

    return _audited(actor, Action.REPLAY_DEAD_LETTERS, prefix, group, requested, act)


def purge_dead_letters(
    actor: Actor, stream_prefix: str, consumer_group: str, ids: list[str] | None, *, reason: str
) -> dict[str, Any]:
    """Delete the listed dead letters, or (``ids=None``) every dead letter of the group."""
    raise_unless_admin(actor, Action.PURGE_DEAD_LETTERS)
    prefix, group = _group_target(stream_prefix, consumer_group)
    dlq_ids = None if ids is None else validate_entry_ids(ids, "ids")
    requested: dict[str, Any] = {
        "ids": dlq_ids,
        "all": dlq_ids is None,
        "reason": validate_reason(reason, required=True),
    }

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        result = store.purge_dead_letters(prefix, group, dlq_ids)
        details["purged"] = result["purged"]
        return result

    return _audited(actor, Action.PURGE_DEAD_LETTERS, prefix, group, requested, act)


def set_retention(
    actor: Actor, stream_prefix: str, policy: RetentionPolicy, *, reason: str = ""
) -> dict[str, Any]:
    """Set the prefix's retention policy; returns the prefix description. The caps are opt-in data
    loss: the audit row keeps the previous policy next to the new one."""
    raise_unless_admin(actor, Action.SET_RETENTION)
    prefix = validate_identifier(stream_prefix, "stream_prefix")
    if not isinstance(policy, RetentionPolicy):
        raise InvalidRequest("policy must be a RetentionPolicy", field="policy")
    policy = policy.validated()
    requested = {"policy": dataclasses.asdict(policy), "reason": validate_reason(reason, required=False)}

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        details["previous"] = store.describe_prefix(prefix).get("retention")
        return store.set_retention(prefix, policy)

    return _audited(actor, Action.SET_RETENTION, prefix, "", requested, act)


def delete_prefix(
    actor: Actor, stream_prefix: str, *, force: bool = False, reason: str = ""
) -> dict[str, Any]:
    """Delete the stream prefix: its metadata, every stream, dead-letter and redeliver key. Refused
    (STREAM_PREFIX_NOT_EMPTY) while it has groups or unconsumed entries, unless ``force``. The audit
    row keeps the usage it had (groups, unconsumed entries, streams) just before."""
    raise_unless_admin(actor, Action.DELETE_PREFIX)
    prefix = validate_identifier(stream_prefix, "stream_prefix")
    if not isinstance(force, bool):
        raise InvalidRequest("force must be true or false", field="force")
    requested = {"force": force, "reason": validate_reason(reason, required=False)}

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        details["usage"] = store.prefix_usage(prefix)
        result = store.delete_prefix(prefix, force=force)
        details["deleted_keys"] = result["deleted_keys"]
        return result

    return _audited(actor, Action.DELETE_PREFIX, prefix, "", requested, act)


# ------------------------------------------------------------------------------------------ group actions


def create_group(actor: Actor, command: CreateGroup, *, start_from: str = "latest") -> dict[str, Any]:
    """Create a consumer group (and its stream prefix, given ``shard_count``, if new); returns the
    group's description. The core validates the command (identifiers, config ranges)."""
    raise_unless_admin(actor, Action.CREATE_GROUP)
    if not isinstance(command, CreateGroup):
        raise InvalidRequest("command must be a CreateGroup", field="command")
    prefix, group = _group_target(command.stream_prefix, command.consumer_group)
    require_lease_above_tick(command.config.validated().lease_ttl_ms, conf.settings().RSC_TICK_INTERVAL_MS)
    requested = {
        "shard_count": command.shard_count,
        "config": dataclasses.asdict(command.config),
        "start_from": start_from,
    }

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        return store.create_group(command, start_from=start_from)

    return _audited(actor, Action.CREATE_GROUP, prefix, group, requested, act)


def set_max_concurrency(
    actor: Actor, stream_prefix: str, consumer_group: str, max_concurrency: int
) -> dict[str, Any]:
    """Set the group's cap on worker threads per member; returns the group's description. The audit
    row keeps the previous value."""
    raise_unless_admin(actor, Action.SET_MAX_CONCURRENCY)
    prefix, group = _group_target(stream_prefix, consumer_group)
    if isinstance(max_concurrency, bool) or not isinstance(max_concurrency, int):
        raise InvalidRequest("max_concurrency must be an integer", field="max_concurrency")
    requested = {"max_concurrency": max_concurrency}

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        details["previous"] = load_group(store.reader, prefix, group)[2].config.max_concurrency  # one load
        return store.set_max_concurrency(prefix, group, max_concurrency)

    return _audited(actor, Action.SET_MAX_CONCURRENCY, prefix, group, requested, act)


def change_shard_count(
    actor: Actor,
    stream_prefix: str,
    shard_count: int,
    ordering: OrderingMode,
    *,
    consumer_group: str = "",
    expected_version: int | None = None,
) -> dict[str, Any]:
    """Start a shard-count change of the whole prefix; returns the prefix description.
    ``consumer_group`` only names the page it was requested from (context in the audit row).
    ``expected_version``: the active routing version the operator reviewed; if it has changed since,
    CONFIRMATION_MISMATCH and nothing changes (a double submit, another operator)."""
    raise_unless_admin(actor, Action.CHANGE_SHARD_COUNT)
    prefix = validate_identifier(stream_prefix, "stream_prefix")
    group = validate_identifier(consumer_group, "consumer_group") if consumer_group else ""
    if isinstance(shard_count, bool) or not isinstance(shard_count, int):
        raise InvalidRequest("shard_count must be an integer", field="shard_count")
    if not isinstance(ordering, OrderingMode):
        raise InvalidRequest("ordering must be strict or relaxed", field="ordering")
    requested = {"shard_count": shard_count, "ordering": ordering.value}

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        before = store.describe_prefix(prefix)["topology"]
        details.update(from_version=before["active_version"], from_shard_count=before["shard_count"])
        if expected_version is not None and expected_version != before["active_version"]:
            raise ConfirmationMismatch(
                f"the active routing version changed from v{expected_version} to "
                f"v{before['active_version']} since the confirmation was shown; nothing was changed, "
                "review and retry",
                expected_version=expected_version,
                active_version=before["active_version"],
            )
        after = store.change_shard_count(prefix, shard_count, ordering)
        details.update(to_version=after["topology"]["active_version"], groups=after["groups"])
        return after

    return _audited(actor, Action.CHANGE_SHARD_COUNT, prefix, group, requested, act)


def delete_group(
    actor: Actor, stream_prefix: str, consumer_group: str, *, force: bool = False, reason: str = ""
) -> dict[str, Any]:
    """Delete the group: its metadata, Redis consumer groups, dead letters. Refused
    (GROUP_HAS_UNCONSUMED_ENTRIES, with the ``lag`` and ``pending`` totals) while the group has
    entries not yet delivered or not acknowledged, unless ``force``: a group created again with the
    name would silently skip them. The audit row keeps the totals it had just before.

    The check reads the backlog, then deletes: entries appended in between are not counted (the
    producers of a group being deleted should have stopped; ``force`` is what covers the rest)."""
    raise_unless_admin(actor, Action.DELETE_GROUP)
    prefix, group = _group_target(stream_prefix, consumer_group)
    if not isinstance(force, bool):
        raise InvalidRequest("force must be true or false", field="force")
    requested = {"force": force, "reason": validate_reason(reason, required=False)}

    def act(store: MetadataStore, details: dict[str, Any]) -> dict[str, Any]:
        details["unconsumed"] = totals = store.unconsumed_totals(prefix, group)
        if not force and (totals["lag"] > 0 or totals["pending"] > 0):
            raise GroupHasUnconsumedEntries(
                f"group {group!r} of stream prefix {prefix!r} has {totals['lag']} entries not yet "
                f"delivered and {totals['pending']} pending; deleting it loses them (a group created "
                "again with this name skips them). Send force=true to delete anyway",
                stream_prefix=prefix,
                consumer_group=group,
                lag=totals["lag"],
                pending=totals["pending"],
                missing="force",
            )
        store.delete_group(prefix, group)
        return {"deleted": True, **totals}

    return _audited(actor, Action.DELETE_GROUP, prefix, group, requested, act)


# ------------------------------------------------------------------------------------------ autoscaling


def group_scaling(stream_prefix: Any, consumer_group: Any) -> dict[str, Any]:
    """A group's autoscaling figures (docs/autoscaling.md): backlog, shards, oldest undelivered age. A
    read, so no actor and no audit row: whoever may scrape metrics may read it (the caller checks the
    scrape token). A group or prefix that does not exist answers zeros with ``exists`` false, as an
    autoscaler expects; a malformed identifier is INVALID_IDENTIFIER (checked before any read)."""
    prefix, group = _group_target(stream_prefix, consumer_group)
    return get_store().scaling.group(prefix, group).as_json()


# ------------------------------------------------------------------------------------------ credentials

# The fields of an API credential an operator may change (the token never changes: issue a new one).
CREDENTIAL_FIELDS = ("role", "active", "stream_prefixes", "consumer_groups", "member_id_prefix")
SCOPE_FIELDS = ("stream_prefixes", "consumer_groups", "member_id_prefix")
MAX_CREDENTIAL_NAME_CHARS = 100


def issue_credential(
    actor: Actor,
    name: str,
    role: str,
    *,
    stream_prefixes: str | None = None,
    consumer_groups: str | None = None,
    member_id_prefix: str | None = None,
    reason: str = "",
) -> tuple[ApiCredential, str]:
    """Issue an API credential with a fresh random token; returns it with the token (shown once, never
    stored or audited: only its SHA-256 is). A member credential may be scoped (patterns of stream
    prefixes and groups, a member-id prefix); an admin credential takes no scope."""
    raise_unless_admin(actor, Action.ISSUE_CREDENTIAL)
    if not isinstance(name, str) or not 0 < len(name.strip()) <= MAX_CREDENTIAL_NAME_CHARS:
        raise InvalidRequest(f"name must be 1-{MAX_CREDENTIAL_NAME_CHARS} characters", field="name")
    name = name.strip()
    if role not in ApiCredential.Role.values:
        raise InvalidRequest(f"role must be one of {', '.join(ApiCredential.Role.values)}", field="role")
    scope = {
        "stream_prefixes": stream_prefixes,
        "consumer_groups": consumer_groups,
        "member_id_prefix": member_id_prefix,
    }
    if role == ApiCredential.Role.ADMIN and any(v is not None for v in scope.values()):
        raise InvalidRequest("an admin credential has no scope", field="role")
    reason = validate_reason(reason, required=False)
    credential, token = _validated(
        lambda: ApiCredential.new(
            name,
            role,
            stream_prefixes=stream_prefixes or ANY,
            consumer_groups=consumer_groups or ANY,
            member_id_prefix=member_id_prefix or "",
        )
    )
    requested = {"credential": name, "role": role, **_scope_of(credential), "reason": reason}

    def save(details: dict[str, Any]) -> ApiCredential:
        credential.save()
        details["credential_id"] = credential.pk
        return credential

    return _audited_change(actor, Action.ISSUE_CREDENTIAL, "", "", requested, save), token


def change_credential(
    actor: Actor, credential_id: int, *, reason: str = "", **changes: Any
) -> ApiCredential:
    """Change some of ``CREDENTIAL_FIELDS`` of a credential; returns it as saved (unchanged when nothing
    differs, and then no row is written). One audit row per call, whose action is what gives the token
    most power: ``reactivate_credential`` (active again), else ``change_credential`` (role, scope), else
    ``deactivate_credential``; its details have every field's [before, after]. Everything but a
    deactivation needs the admin role; a deactivation alone needs ``may_deactivate_credentials``."""
    unknown = sorted(set(changes) - set(CREDENTIAL_FIELDS))
    if unknown:
        raise InvalidRequest(f"not a field an operator may change: {', '.join(unknown)}", field=unknown[0])
    reason = validate_reason(reason, required=False)
    try:
        credential = ApiCredential.objects.get(pk=credential_id)
    except (ApiCredential.DoesNotExist, ValueError, TypeError) as e:
        raise InvalidRequest(f"no API credential {credential_id!r}", field="credential") from e
    before = {f: getattr(credential, f) for f in CREDENTIAL_FIELDS}
    changed = {f: v for f, v in changes.items() if v != before[f]}
    if not changed:
        return credential
    if changed.get("active") is True:
        action = Action.REACTIVATE_CREDENTIAL
    elif set(changed) - {"active"}:
        action = Action.CHANGE_CREDENTIAL
    else:
        action = Action.DEACTIVATE_CREDENTIAL
    if not (action == Action.DEACTIVATE_CREDENTIAL and actor.may_deactivate_credentials):
        raise_unless_admin(actor, action)
    if "active" in changed and not isinstance(changed["active"], bool):
        raise InvalidRequest("active must be true or false", field="active")
    for field, value in changed.items():
        setattr(credential, field, value)
    _validated(credential.full_clean)
    for field in ("stream_prefixes", "consumer_groups"):
        if field in changed:  # stored as issue() stores them: one space between patterns
            setattr(credential, field, " ".join(parse_patterns(getattr(credential, field), field)))
    requested = {
        "credential": credential.name,
        "credential_id": credential.pk,
        "changes": {f: [before[f], getattr(credential, f)] for f in changed},
        "reason": reason,
    }

    def save(details: dict[str, Any]) -> ApiCredential:
        # post_save drops the cached credentials here and, once committed, in every process (credentials.py)
        credential.save(update_fields=list(changed))
        return credential

    return _audited_change(actor, action, "", "", requested, save)


def deactivate_credential(actor: Actor, credential_id: int, *, reason: str = "") -> ApiCredential:
    """Refuse the credential's token from the next request on, in every process (audited)."""
    return change_credential(actor, credential_id, active=False, reason=reason)


def reactivate_credential(actor: Actor, credential_id: int, *, reason: str = "") -> ApiCredential:
    """Accept the credential's token again: needs the admin role, as issuing one does (audited)."""
    return change_credential(actor, credential_id, active=True, reason=reason)


def _scope_of(credential: ApiCredential) -> dict[str, str]:
    if credential.role != ApiCredential.Role.MEMBER:
        return {}
    return {f: getattr(credential, f) for f in SCOPE_FIELDS}


def _validated(build: Callable[[], _T]) -> _T:
    """``build()``; a Django ValidationError becomes InvalidRequest naming the first field."""
    try:
        return build()
    except ValidationError as e:
        errors = e.message_dict if hasattr(e, "error_dict") else {"credential": e.messages}
        field = next(iter(errors))
        text = "; ".join(f"{f}: {' '.join(m)}" for f, m in errors.items())
        raise InvalidRequest(text, field=field if field != "__all__" else "credential") from e


# ------------------------------------------------------------------------------------------ audit retention


def prune_audit(*, older_than_days: int | None = None, dry_run: bool = False) -> int:
    """Delete audit rows older than ``older_than_days`` (default ``RSC_AUDIT_RETENTION_DAYS``, 365);
    with ``dry_run`` only count them. Returns the number of rows (to be) deleted."""
    name = "older_than_days"
    if older_than_days is None:
        name = "RSC_AUDIT_RETENTION_DAYS"
        older_than_days = conf.settings().RSC_AUDIT_RETENTION_DAYS
    days = require_int_in_range(older_than_days, name, 1, 100 * 365)
    return audit.prune(before=timezone.now() - timedelta(days=days), dry_run=dry_run)
