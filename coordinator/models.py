"""The coordinator's models: API credentials kept in the database (the environment's RSC_*_TOKENS are
the other source), and the audit trail of operator actions.

Only a token's SHA-256 is stored: a leaked database does not leak usable tokens, and the token itself is
shown once, by ``manage.py create_api_credential``. The model also carries the custom permission
``coordinator.manage_groups`` that lets a logged-in staff user call the admin API from a browser session.

``AuditEntry`` is one row per state-changing action attempted, successful or refused, from the
operator pages, the HTTP API or a management command (``source``). It is a real table, not Django's
``LogEntry``: the target is a Redis group, not a database row (``LogEntry`` wants a content type and an
object id), and an operator needs the structured details (shard count, ordering, previous value, the
entries a skip acknowledged) and the outcome (``ok`` or the error code) in one place.

The actions of ``coordinator/operations.py`` write their row *before* they change anything, with the
outcome ``pending``, and settle it afterwards. A row that stays ``pending`` is an action whose outcome
was never recorded (the process died, or the database failed between the change and the update): treat
it as "may have happened" and check the group. Rows are pruned after ``RSC_AUDIT_RETENTION_DAYS``
(``manage.py prune_audit``). The operator pages list the rows through a proxy (admin_ui/models.py).
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import secrets
from collections.abc import Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

TOKEN_PREFIX = "rsc_"
ANY = "*"
# A scope pattern: an identifier's characters plus the glob wildcards * and ?.
_PATTERN_RE = re.compile(r"[A-Za-z0-9._*?-]{1,64}")
_MEMBER_ID_PREFIX_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
MAX_PATTERNS = 32


def parse_patterns(text: str, field: str) -> tuple[str, ...]:
    """``"orders-* billing"`` -> ``("orders-*", "billing")``: whitespace- or comma-separated glob patterns
    (``*`` any run of characters, ``?`` one). Raises ValidationError naming ``field``."""
    patterns = tuple(dict.fromkeys(p for p in re.split(r"[\s,]+", text.strip()) if p))
    if not patterns:
        raise ValidationError({field: f"give at least one pattern ('{ANY}' for any)"})
    if len(patterns) > MAX_PATTERNS:
        raise ValidationError({field: f"at most {MAX_PATTERNS} patterns"})
    bad = [p for p in patterns if not _PATTERN_RE.fullmatch(p)]
    if bad:
        raise ValidationError(
            {field: f"{bad[0]!r} is not a pattern: 1-64 of [A-Za-z0-9._-] and the wildcards * and ?"}
        )
    return patterns


def matches_any(value: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(value, p) for p in patterns)


def token_digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


class ApiCredential(models.Model):
    class Role(models.TextChoices):
        MEMBER = "member", "member (heartbeat, routing)"
        ADMIN = "admin", "admin (everything)"

    name = models.CharField(max_length=100, unique=True, help_text="Who holds it, e.g. 'orders-workers'.")
    role = models.CharField(max_length=16, choices=Role.choices)
    token_sha256 = models.CharField(
        max_length=64, unique=True, editable=False, help_text="Hex SHA-256 of the token (never the token)."
    )
    active = models.BooleanField(default=True, help_text="Inactive credentials are refused at once.")
    # The scope of a member credential (docs/protocol.md section 13, "Credentials and scopes"). An admin
    # credential may do everything; its scope fields are not consulted.
    stream_prefixes = models.CharField(
        max_length=1000,
        default=ANY,
        help_text="Member credentials: the stream prefixes it may use, as glob patterns separated by "
        "spaces or commas ('orders-*'); '*' for any.",
    )
    consumer_groups = models.CharField(
        max_length=1000,
        default=ANY,
        help_text="Member credentials: the consumer groups it may join, as glob patterns; '*' for any.",
    )
    member_id_prefix = models.CharField(
        max_length=64,
        blank=True,
        default="",
        help_text="Member credentials: if set, every member id it joins must start with this.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "API credential"
        ordering = ("name",)
        permissions = (("manage_groups", "Can manage consumer groups through the coordinator API"),)

    def __str__(self) -> str:
        return f"{self.name} ({self.role}{'' if self.active else ', inactive'})"

    def clean(self) -> None:
        parse_patterns(self.stream_prefixes, "stream_prefixes")
        parse_patterns(self.consumer_groups, "consumer_groups")
        if self.member_id_prefix and not _MEMBER_ID_PREFIX_RE.fullmatch(self.member_id_prefix):
            raise ValidationError(
                {"member_id_prefix": "1-64 of [A-Za-z0-9._-], starting with a letter or digit"}
            )

    @property
    def is_scoped(self) -> bool:
        return self.role == self.Role.MEMBER and (
            parse_patterns(self.stream_prefixes, "stream_prefixes") != (ANY,)
            or parse_patterns(self.consumer_groups, "consumer_groups") != (ANY,)
            or bool(self.member_id_prefix)
        )

    @classmethod
    def new(
        cls,
        name: str,
        role: str,
        *,
        stream_prefixes: str = ANY,
        consumer_groups: str = ANY,
        member_id_prefix: str = "",
    ) -> tuple[ApiCredential, str]:
        """A credential with a fresh random token, validated (ValidationError: a malformed scope, a name
        taken) but not saved; returns it with the token (shown once). ``coordinator.operations.
        issue_credential`` saves it, audited: the way every entry point issues one."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        credential = cls(
            name=name,
            role=role,
            token_sha256=token_digest(token).hex(),
            stream_prefixes=" ".join(parse_patterns(stream_prefixes, "stream_prefixes")),
            consumer_groups=" ".join(parse_patterns(consumer_groups, "consumer_groups")),
            member_id_prefix=member_id_prefix,
        )
        credential.full_clean()
        return credential, token

    @classmethod
    def issue(cls, name: str, role: str, **scope: str) -> tuple[ApiCredential, str]:
        """:meth:`new`, saved at once, without an audit row: for tests and fixtures only (the entry points
        go through ``coordinator.operations.issue_credential``)."""
        credential, token = cls.new(name, role, **scope)
        credential.save()
        return credential, token


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
        # API credentials (coordinator/operations.py): stream_prefix is empty, details name the credential.
        ISSUE_CREDENTIAL = "issue_credential", "issue API credential"
        DEACTIVATE_CREDENTIAL = "deactivate_credential", "deactivate API credential"
        REACTIVATE_CREDENTIAL = "reactivate_credential", "re-activate API credential"
        CHANGE_CREDENTIAL = "change_credential", "change an API credential's role or scope"

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
        # The table admin_ui created before the model moved here (migrations coordinator 0003 and
        # admin_ui 0004 move the model without touching the table or its rows).
        db_table = "admin_ui_auditentry"
        ordering = ("-timestamp", "-id")
        verbose_name = "audit entry"
        verbose_name_plural = "audit entries"

    def __str__(self) -> str:
        target = f"{self.stream_prefix}/{self.consumer_group}" if self.consumer_group else self.stream_prefix
        if not target and isinstance(self.details, dict) and "credential" in self.details:
            target = f"credential {self.details['credential']}"
        return f"{self.username} {self.action} {target}: {self.outcome}"
