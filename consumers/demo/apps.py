from django.apps import AppConfig


class DemoConfig(AppConfig):
    name = "consumers.demo"
    label = "rsc_demo"
    verbose_name = "Coordinator demo"
