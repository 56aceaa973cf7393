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
        from consumers import logdefaults

        # Connects the credential-cache invalidation signals (dispatch_uid makes it idempotent).
        from . import credentials  # noqa: F401
        from .celery import quiet_beat_task_logs

        # Logging (docs/plugin.md section 8): the apps' INFO lines on stderr unless the host's LOGGING
        # configured their loggers (until Celery sets up its own: then its -l decides); Celery's per-run
        # INFO lines of the tick and the retention pass left out unless RSC_BEAT_TASK_LOGS (section 5).
        logdefaults.install("coordinator", "admin_ui")
        quiet_beat_task_logs()

    def metadata_store(self) -> Any:
        """This process's metadata store (``coordinator.store.get_store``): what a member process hosts
        when ``RSC_COORDINATOR_URL`` is ``"inprocess"``. ``run_member`` reaches it through Django's app
        registry (``apps.get_app_config("coordinator")``), so the members' package imports nothing of
        the store (tests/test_layering.py)."""
        from coordinator.store import get_store

        return get_store()
