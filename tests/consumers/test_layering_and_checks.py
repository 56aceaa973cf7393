"""The member's layering (a sans-I/O state machine; a runtime that needs no Django) and the consumers
system checks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from consumers.checks import check_consumer_settings
from consumers.member import retry, values
from tests.test_layering import imported_modules

ROOT = Path(__file__).resolve().parents[2]
STATE_MODULES = [ROOT / "consumers" / "member" / name for name in ("state.py", "values.py", "retry.py")]
IO_MODULES = ("redis", "django", "socket", "threading", "subprocess", "http", "time", "random", "consumers")


@pytest.mark.parametrize("path", STATE_MODULES, ids=lambda p: p.name)
def test_the_member_state_machine_imports_no_io_clock_or_runtime_module(path: Path) -> None:
    module = f"consumers.member.{path.stem}"
    imported = imported_modules(path.read_text(), module, is_package=False)
    pure_modules = (values, retry)  # plain values and pure functions: no I/O of their own
    pure = {m.__name__ for m in pure_modules} | {f"{m.__name__}.{n}" for m in pure_modules for n in dir(m)}
    imported = [m for m in imported if m not in pure]
    assert [m for m in imported if any(m == n or m.startswith(n + ".") for n in IO_MODULES)] == []
    assert [
        m for m in imported if m.startswith("coordinator.") and not m.startswith("coordinator.protocol.")
    ] == []


def test_the_member_runtime_runs_without_django() -> None:
    """A plain Python process can import and build everything consumers.run needs; Django stays out."""
    program = (
        "import sys\n"
        "import consumers, consumers.process, consumers.client, consumers.member.member\n"
        "from consumers import listener, Runtime, run, ConsumerProcess, HttpCoordinatorClient\n"
        "assert not [m for m in sys.modules if m == 'django' or m.startswith('django.')], 'django loaded'\n"
        "print('ok')\n"
    )
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def ids(settings: Any) -> list[str]:
    return sorted(m.id or "" for m in check_consumer_settings())


def test_default_consumer_settings_pass() -> None:
    assert check_consumer_settings() == []


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("RSC_RUNTIME", {"max_concurrency": 0}, "consumers.E001"),
        ("RSC_RUNTIME", {"workers": 4}, "consumers.E001"),
        ("RSC_RUNTIME", "no.such.factory", "consumers.E001"),
        ("RSC_LISTENER_CONCURRENCY", {"billing": "five"}, "consumers.E002"),
        ("RSC_LISTENER_CONCURRENCY", ["billing"], "consumers.E002"),
        ("RSC_COORDINATOR_URL", "coordinator:8000", "consumers.E003"),
        ("RSC_SHUTDOWN_TIMEOUT_S", -1, "consumers.E004"),
        ("RSC_COORDINATOR_URL", "http://coordinator.internal:8000", "consumers.E005"),
        ("RSC_COORDINATOR_URL", "http://10.1.2.3", "consumers.E005"),
    ],
)
def test_impossible_consumer_settings_are_rejected(settings: Any, name: str, value: Any, error: str) -> None:
    setattr(settings, name, value)
    assert ids(settings) == [error]


def test_good_alternatives_pass(settings: Any) -> None:
    settings.RSC_RUNTIME = "tests.consumers.test_declarations.runtime_factory"
    settings.RSC_LISTENER_CONCURRENCY = {"billing": "5", "shipping": 2}
    settings.RSC_COORDINATOR_URL = "inprocess"
    assert ids(settings) == []


def test_plain_http_to_another_machine_passes_only_when_allowed(settings: Any) -> None:
    settings.RSC_COORDINATOR_URL = "http://web:8000"
    (error,) = check_consumer_settings()
    assert error.id == "consumers.E005" and "in clear" in error.msg
    settings.RSC_ALLOW_INSECURE_COORDINATOR_URL = True
    assert ids(settings) == []
    for url in ("https://web:8000", "http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:1"):
        settings.RSC_ALLOW_INSECURE_COORDINATOR_URL = False
        settings.RSC_COORDINATOR_URL = url
        assert ids(settings) == [], url


def test_the_in_process_coordinator_is_the_coordinator_apps_store_found_by_label(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """run_member's inprocess mode asks Django's app registry for the coordinator app's store; without
    that app installed it says so (no import of the store from the members' package)."""
    from django.apps import apps
    from django.core.management.base import CommandError

    import coordinator.store
    from consumers.management.commands import run_member

    store = object()
    monkeypatch.setattr(coordinator.store, "get_store", lambda: store)  # no Redis needed for the lookup
    assert run_member._in_process_store() is store

    def no_app(label: str) -> None:
        raise LookupError(label)

    monkeypatch.setattr(apps, "get_app_config", no_app)
    with pytest.raises(CommandError, match='needs the "coordinator" app in INSTALLED_APPS'):
        run_member._in_process_store()
