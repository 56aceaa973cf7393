"""Two models: a placeholder that carries the operator pages' permission, and the audit trail.

``ConsumerGroup`` has no table (``managed = False``): consumer groups live in Redis, not in the ORM. It
exists so that the admin can list "Consumer groups" on its index page (its changelist is replaced by
the pages in ``admin_ui/admin.py``) and so that the permission ``admin_ui.view_groups`` exists. Changes
are authorised by the coordinator's own ``coordinator.manage_groups`` (see ``admin_ui/access.py``).

``AuditEntry`` is one row per state-changing action attempted, successful or refused, from the
operator pages, the HTTP API or a management command (``source``). It is a real table, not Django's
``LogEntry``: the target is a Redis group, not a database row (``LogEntry`` wants a content type and an
object id), and an operator needs the structured details (shard count, ordering, previous value, the
entries a skip acknowledged) and the outcome (``ok`` or the error code) in one place.

The actions of ``coordinator/operations.py`` write their row *before* they change anything, with the
outcome ``pending``, and settle it afterwards. A row that stays ``pending`` is an action whose outcome
was never recorded (the process died, or the database failed between the change and the update): treat
it as "may have happened" and check the group. Rows are pruned after ``RSC_AUDIT_RETENTION_DAYS``
(``manage.py prune_audit``).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class ConsumerGroup(models.Model):
    """Placeholder: no table, no rows. Only its permission and its admin entry are used."""

    class Meta:
        managed = False
        # add/change/delete/view of rows mean nothing for a model without rows.
        default_permissions = ()
        permissions = (("view_groups", "Can view consumer groups: epochs, assignments, revocations"),)
        verbose_name = "consumer group"
        verbose_name_plural = "consumer groups"


class AuditEntry(models.Model):
    class Action(models.TextChoices):
        CREATE_GROUP = "create_group", "create group"
        SET_MAX_CONCURRENCY = "set_max_concurrency", "set max_concurrency"
        CHANGE_SHARD_COUNT = "change_shard_count", "change shard count"
        DELETE_GROUP = "delete_group", "delete group"
        SKIP_ENTRIES = "skip_entries", "skip pending entries"
        REDELIVER = "redeliver", "redeliver pending entries"
        RELEASE_DRAIN = "release_drain", "release a group from a migration's drain"
        REPLAY_DEAD_LETTERS = "replay_dead_letters", "replay dead letters"
        PURGE_DEAD_LETTERS = "purge_dead_letters", "purge dead letters"
        SET_RETENTION = "set_retention", "set retention policy"
        DELETE_PREFIX = "delete_prefix", "delete stream prefix"

    class Source(models.TextChoices):
        API = "api", "HTTP API"
        ADMIN_UI = "admin_ui", "operator pages"
        COMMAND = "command", "management command"

    OK = "ok"
    # Written before the change; replaced by "ok" or the error code once the outcome is known.
    PENDING = "pending"

    timestamp = models.DateTimeField(auto_now_add=True, db_index=True)
    # SET_NULL plus a copy of the name: deleting a user must not delete what they did.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    username = models.CharField(max_length=150)
    action = models.CharField(max_length=32, choices=Action.choices)
    stream_prefix = models.CharField(max_length=64)
    # Empty for prefix-wide actions requested without a group (a shard-count change names the group
    # page it was requested from, for context).
    consumer_group = models.CharField(max_length=64, blank=True)
    source = models.CharField(max_length=16, choices=Source.choices, default=Source.ADMIN_UI)
    details = models.JSONField(default=dict, blank=True)
    outcome = models.CharField(
        max_length=32,
        help_text="'ok', the coordinator's error code, or 'pending' (written before the change; still "
        "'pending' means the outcome was never recorded).",
    )
    message = models.TextField(blank=True, help_text="The error message when the action was refused.")

    class Meta:
        ordering = ("-timestamp", "-id")
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        target = f"{self.stream_prefix}/{self.consumer_group}" if self.consumer_group else self.stream_prefix
        return f"{self.username} {self.action} {target}: {self.outcome}"
