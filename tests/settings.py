"""The test suite's settings: the project's (config/settings.py) in development mode, said explicitly.

Development mode comes from the variable ``DEVELOPMENT`` alone (or DEBUG, its default), never from what
happens to be imported. It is set here for the import of the project's settings and put back at once:
pytest-django loads this module before any conftest runs, and the processes the suite starts (the API
server, Celery, run_member, the dev stack) must not inherit it; they run as production does
(tests/conftest.py gives them a SECRET_KEY and plain HTTP). tests/conftest.py also points
``DJANGO_SETTINGS_MODULE`` back at ``config.settings`` for them.
"""

import os

# Never the settings of a `make run` that happens to run in this checkout (config/devstack_env.py): not
# for this process, nor for the processes the suite starts (they inherit it). A test that wants them
# sets DEVSTACK_DIR itself.
os.environ.setdefault("DEVSTACK_DIR", "")

_before = os.environ.get("DEVELOPMENT")
os.environ["DEVELOPMENT"] = "true"
try:
    from config.settings import *  # noqa: F403
finally:
    if _before is None:
        del os.environ["DEVELOPMENT"]
    else:
        os.environ["DEVELOPMENT"] = _before
