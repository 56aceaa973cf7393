"""The project's configuration errors (no Django settings needed to import this)."""

from django.core.exceptions import ImproperlyConfigured


class SettingsError(ImproperlyConfigured):
    """config/settings.py refuses a setting: its message says, in one line, what to set. manage.py
    prints it without a traceback."""
