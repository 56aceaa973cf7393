"""The package's console default when the host configured no logging (consumers/logdefaults.py;
docs/plugin.md section 8). Each case is a fresh process with a host's settings module that has no
LOGGING (Django's default logging: no handler on the root logger), as logging is process-wide state."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

HOST_SETTINGS = """
SECRET_KEY = "logdefaults-test-" + "k" * 40
INSTALLED_APPS = [
    "django.contrib.admin", "django.contrib.auth", "django.contrib.contenttypes", "django.contrib.sessions",
    "django.contrib.messages", "rest_framework", "axes", "coordinator", "consumers", "admin_ui",
]
DATABASES = {}
USE_TZ = True
"""


def run(tmp_path: Path, script: str, settings: str = HOST_SETTINGS) -> str:
    (tmp_path / "hostsettings.py").write_text(settings)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "LOG_", "DJANGO_"))}
    env.update(DJANGO_SETTINGS_MODULE="hostsettings", PYTHONPATH=f"{tmp_path}{os.pathsep}{REPO}")
    prelude = "import logging, django\ndjango.setup()\nfrom consumers import logdefaults\n"
    code = prelude + textwrap.dedent(script)
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stderr


def test_without_host_logging_the_packages_info_lines_reach_stderr_once(tmp_path: Path) -> None:
    err = run(
        tmp_path,
        """
        logging.getLogger("consumers.member").info("member starting")
        logging.getLogger("coordinator.service").info("member expired")
        logging.getLogger("admin_ui.audit").info("audited")
        logging.getLogger("billing.listeners").info("not the package's: stays at WARNING")
        logging.getLogger("consumers.member").debug("below INFO")
        """,
    )
    assert err.count("INFO consumers.member: member starting") == 1
    assert err.count("INFO coordinator.service: member expired") == 1
    assert err.count("INFO admin_ui.audit: audited") == 1
    assert "not the package's" not in err and "below INFO" not in err


def test_run_members_root_default_shows_the_listeners_lines_and_prints_nothing_twice(tmp_path: Path) -> None:
    err = run(
        tmp_path,
        """
        logdefaults.install("")   # what run_member does first
        logging.getLogger("billing.listeners").info("billed order 42")
        logging.getLogger("consumers.member").info("member starting")
        """,
    )
    assert err.count("INFO billing.listeners: billed order 42") == 1
    assert err.count("member starting") == 1


def test_a_handler_added_later_takes_over(tmp_path: Path) -> None:
    err = run(
        tmp_path,
        """
        import sys
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("HOST %(name)s %(message)s"))
        logging.getLogger().addHandler(handler)
        logging.getLogger("consumers.member").info("member starting")
        """,
    )
    assert err.splitlines() == ["HOST consumers.member member starting"]


def test_a_host_logging_that_configures_the_root_logger_is_left_alone(tmp_path: Path) -> None:
    settings = HOST_SETTINGS + textwrap.dedent(
        """
        LOGGING = {
            "version": 1,
            "disable_existing_loggers": False,
            "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "f"}},
            "formatters": {"f": {"format": "HOST %(levelname)s %(name)s %(message)s"}},
            "root": {"handlers": ["console"], "level": "WARNING"},
        }
        """
    )
    err = run(
        tmp_path,
        """
        logging.getLogger("consumers.member").info("member starting")
        logging.getLogger("consumers.member").warning("member warned")
        """,
        settings,
    )
    assert err.splitlines() == ["HOST WARNING consumers.member member warned"]


def test_celery_setting_up_its_logging_takes_the_default_back(tmp_path: Path) -> None:
    err = run(
        tmp_path,
        """
        from celery import signals
        logging.getLogger("coordinator.service").info("before celery")
        signals.after_setup_logger.send(sender=None, logger=logging.getLogger(), loglevel=logging.WARNING)
        logging.getLogger("coordinator.service").info("after celery, at its -l WARNING")
        logging.getLogger("coordinator.service").warning("a warning still shows")
        """,
    )
    assert "INFO coordinator.service: before celery" in err
    assert "after celery" not in err
    assert "a warning still shows" in err  # Python's last resort: Celery's own handler in a real worker
