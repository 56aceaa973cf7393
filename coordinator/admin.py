"""Django admin for API credentials: list, inspect, (de)activate. Tokens are issued by
``manage.py create_api_credential`` only, which prints the token once; the admin never sees one."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest

from .api.auth import forget_cached_credentials
from .models import ApiCredential


@admin.register(ApiCredential)
class ApiCredentialAdmin(admin.ModelAdmin):
    list_display = ("name", "role", "active", "created_at")
    list_filter = ("role", "active")
    search_fields = ("name",)
    readonly_fields = ("name", "token_sha256", "created_at")
    fields = ("name", "role", "active", "token_sha256", "created_at")
    actions = ("deactivate",)

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False  # a token must be shown once to whoever creates it: use the management command

    @admin.action(description="Deactivate the selected credentials (refused at once)")
    def deactivate(self, request: HttpRequest, queryset: QuerySet[ApiCredential]) -> None:
        updated = queryset.update(active=False)  # no post_save: clear this process's cache explicitly
        forget_cached_credentials(using=queryset.db)
        self.message_user(request, f"{updated} credential(s) deactivated.")
