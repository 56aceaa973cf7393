from django.apps import AppConfig


class ConsumersConfig(AppConfig):
    name = "consumers"
    verbose_name = "Stream consumers"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # No I/O, and no listener discovery (run_member does that). The check registry is a set, so
        # running ready() twice (as tests may) is harmless.
        from django.conf import settings
        from django.core import checks

        from . import logdefaults
        from .checks import check_consumer_settings
        from .conf import apply_defaults

        # A host project defines only the RSC_* settings it changes (docs/plugin.md); idempotent.
        apply_defaults(settings)
        checks.register(check_consumer_settings, "consumers")
        # Its INFO lines on stderr unless the host's LOGGING configured this logger (docs/plugin.md).
        logdefaults.install("consumers")
