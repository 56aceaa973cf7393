from django.apps import AppConfig


class AdminUiConfig(AppConfig):
    name = "admin_ui"
    verbose_name = "Coordinator operations"
    default_auto_field = "django.db.models.BigAutoField"
