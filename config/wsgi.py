"""WSGI entry point (``config.wsgi:application``; ``python -m config.serve`` serves it with granian).

Steady member heartbeats are answered by the heartbeat door before Django's request handling
(coordinator/api/door.py); every other request, and any heartbeat the door is unsure of, goes to Django.
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

application = get_wsgi_application()

from config.serve import exit_with_parent, without_process_environment  # noqa: E402
from coordinator.api.door import HeartbeatDoor  # noqa: E402  (after Django is set up)

application = without_process_environment(HeartbeatDoor(application))

if os.environ.get("RSC_EXIT_WITH_PARENT"):  # the test stacks (tests/e2e/stack.py)
    exit_with_parent()
