#!/usr/bin/env python
"""Django's command-line utility for administrative tasks."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    from config.errors import SettingsError

    try:
        execute_from_command_line(sys.argv)
    except SettingsError as exc:  # config/settings.py refused a setting: what to set, not a traceback
        sys.exit(f"manage.py: {exc}")


if __name__ == "__main__":
    main()
