from django.apps import AppConfig


class CoordinatorConfig(AppConfig):
    name = "coordinator"
    verbose_name = "Stream coordinator"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # No I/O here. The registry is a set, so running ready() twice (as tests may) is harmless.
        from django.core import checks

        from .checks import check_rsc_settings

        checks.register(check_rsc_settings, "rsc")
        # Connects the credential-cache invalidation signals (dispatch_uid makes it idempotent).
        from .api import auth  # noqa: F401
