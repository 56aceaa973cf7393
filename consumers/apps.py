from django.apps import AppConfig


class ConsumersConfig(AppConfig):
    name = "consumers"
    verbose_name = "Stream consumers"
    default_auto_field = "django.db.models.BigAutoField"
