"""API credentials kept in the database (the environment's RSC_*_TOKENS are the other source).

Only a token's SHA-256 is stored: a leaked database does not leak usable tokens, and the token itself is
shown once, by ``manage.py create_api_credential``. The model also carries the custom permission
``coordinator.manage_groups`` that lets a logged-in staff user call the admin API from a browser session.
"""

from __future__ import annotations

import hashlib
import secrets

from django.db import models

TOKEN_PREFIX = "rsc_"


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
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = "API credential"
        ordering = ("name",)
        permissions = (("manage_groups", "Can manage consumer groups through the coordinator API"),)

    def __str__(self) -> str:
        return f"{self.name} ({self.role}{'' if self.active else ', inactive'})"

    @classmethod
    def issue(cls, name: str, role: str) -> tuple[ApiCredential, str]:
        """Create a credential with a fresh random token; returns it with the token (shown once)."""
        token = TOKEN_PREFIX + secrets.token_urlsafe(32)
        credential = cls.objects.create(name=name, role=role, token_sha256=token_digest(token).hex())
        return credential, token
