from typing import Any

from django.apps import AppConfig


class CoordinatorConfig(AppConfig):
    name = "coordinator"
    verbose_name = "Stream coordinator"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # No I/O here. The registry is a set, so running ready() twice (as tests may) is harmless.
        from django.conf import settings
        from django.core import checks

        from .checks import check_celery_broker, check_rsc_settings, check_trusted_proxy_header
        from .conf import apply_defaults

        # A host project defines only the RSC_* settings it changes (docs/plugin.md); idempotent.
        apply_defaults(settings)

        checks.register(check_rsc_settings, "rsc")
        checks.register(check_celery_broker, "rsc")
        checks.register(check_trusted_proxy_header, "rsc")
        # Connects the credential-cache invalidation signals (dispatch_uid makes it idempotent).
        from . import credentials  # noqa: F401

    def metadata_store(self) -> Any:
        """This process's metadata store (``coordinator.store.get_store``): what a member process hosts
        when ``RSC_COORDINATOR_URL`` is ``"inprocess"``. ``run_member`` reaches it through Django's app
        registry (``apps.get_app_config("coordinator")``), so the members' package imports nothing of
        the store (tests/test_layering.py)."""
        from coordinator.store import get_store

        return get_store()
