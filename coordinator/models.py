"""API credentials kept in the database (the environment's RSC_*_TOKENS are the other source).

Only a token's SHA-256 is stored: a leaked database does not leak usable tokens, and the token itself is
shown once, by ``manage.py create_api_credential``. The model also carries the custom permission
``coordinator.manage_groups`` that lets a logged-in staff user call the admin API from a browser session.
"""

from __future__ import annotations

import fnmatch
import hashlib
import re
import secrets
from collections.abc import Iterable

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
    def issue(
        cls,
        name: str,
        role: str,
        *,
        stream_prefixes: str = ANY,
        consumer_groups: str = ANY,
        member_id_prefix: str = "",
    ) -> tuple[ApiCredential, str]:
        """Create a credential with a fresh random token; returns it with the token (shown once).
        Raises ValidationError for a malformed scope (nothing is created)."""
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
        credential.save()
        return credential, token
