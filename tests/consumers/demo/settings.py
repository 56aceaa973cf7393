"""The project's settings plus the demo app (for ``manage.py run_member`` in a subprocess)."""

from config.settings import *  # noqa: F403
from config.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.consumers.demo"]
