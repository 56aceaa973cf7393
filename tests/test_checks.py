"""coordinator/checks.py: impossible timing settings stop `manage.py check`, runserver and migrate."""

import pytest
from django.apps import apps
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from coordinator.checks import DEFAULTS_MS, check_rsc_settings

SETTING_NAMES = sorted(DEFAULTS_MS)


def error_ids(messages: list[checks.CheckMessage]) -> list[str]:
    return sorted(message.id or "" for message in messages)


def test_default_settings_pass() -> None:
    assert check_rsc_settings() == []


def test_missing_settings_fall_back_to_the_defaults(settings) -> None:
    for name in SETTING_NAMES:
        delattr(settings, name)
    assert check_rsc_settings() == []


@pytest.mark.parametrize("tick_ms", [10000, 20000])
def test_tick_interval_not_below_lease_ttl_is_rejected(settings, tick_ms: int) -> None:
    settings.RSC_TICK_INTERVAL_MS = tick_ms
    settings.RSC_MEMBER_LEASE_TTL_MS = 10000
    messages = check_rsc_settings()
    assert error_ids(messages) == ["rsc.E002"]
    assert all(message.level == checks.ERROR for message in messages)


@pytest.mark.parametrize("heartbeat_ms", [10000, 15000])
def test_heartbeat_interval_not_below_lease_ttl_is_rejected(settings, heartbeat_ms: int) -> None:
    settings.RSC_HEARTBEAT_INTERVAL_MS = heartbeat_ms
    settings.RSC_MEMBER_LEASE_TTL_MS = 10000
    assert error_ids(check_rsc_settings()) == ["rsc.E003"]


def test_both_intervals_too_long_reports_both(settings) -> None:
    settings.RSC_MEMBER_LEASE_TTL_MS = 500
    assert error_ids(check_rsc_settings()) == ["rsc.E002", "rsc.E003"]


@pytest.mark.parametrize("name", SETTING_NAMES)
@pytest.mark.parametrize("value", [0, -1, 1.5, "1000", None, True])
def test_non_positive_or_non_integer_value_is_rejected(settings, name: str, value: object) -> None:
    setattr(settings, name, value)
    messages = check_rsc_settings()
    # Only E001: comparing an invalid value with the others would report the same mistake twice.
    assert error_ids(messages) == ["rsc.E001"]
    assert name in messages[0].msg


def test_checks_are_registered_and_stop_manage_py_check(settings) -> None:
    settings.RSC_TICK_INTERVAL_MS = 60000
    with pytest.raises(SystemCheckError, match=r"rsc\.E002"):
        call_command("check")
    with pytest.raises(SystemCheckError, match=r"rsc\.E002"):
        call_command("check", tags=["rsc"])


def test_ready_is_idempotent() -> None:
    config = apps.get_app_config("coordinator")
    config.ready()
    config.ready()
    registered = [check for check in checks.registry.registry.get_checks() if check is check_rsc_settings]
    assert len(registered) == 1
