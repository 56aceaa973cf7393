"""coordinator/checks.py: impossible timing settings stop `manage.py check`, runserver and migrate;
`check --deploy` reports guessable environment tokens."""

from dataclasses import replace

import pytest
from django.apps import apps
from django.core import checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError

from coordinator.checks import (
    DEFAULTS_MS,
    MIN_TOKEN_LENGTH,
    RANGES_MS,
    check_api_tokens,
    check_rsc_settings,
    check_unscoped_member_tokens,
)
from coordinator.protocol.errors import InvalidRequest
from coordinator.protocol.model import GroupConfig
from coordinator.store.redis_store import default_config_from_settings

SETTING_NAMES = sorted(DEFAULTS_MS)
# The settings that are group defaults, and the GroupConfig field each one becomes.
GROUP_DEFAULT_FIELDS = {
    "RSC_MEMBER_LEASE_TTL_MS": "lease_ttl_ms",
    "RSC_HEARTBEAT_INTERVAL_MS": "heartbeat_interval_ms",
    "RSC_REVOCATION_TIMEOUT_MS": "revocation_timeout_ms",
}
WEEK_MS = 7 * 24 * 3_600_000


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
    settings.RSC_MEMBER_LEASE_TTL_MS = 1000
    assert error_ids(check_rsc_settings()) == ["rsc.E002", "rsc.E003"]


@pytest.mark.parametrize(("retention_ms", "ids"), [(9999, ["rsc.E004"]), (10000, []), (WEEK_MS, [])])
def test_retention_below_lease_ttl_is_rejected(settings, retention_ms: int, ids: list[str]) -> None:
    settings.RSC_MEMBER_LEASE_TTL_MS = 10000
    settings.RSC_MEMBER_RETENTION_MS = retention_ms
    assert error_ids(check_rsc_settings()) == ids


def test_retention_beyond_what_the_tick_accepts_is_rejected(settings) -> None:
    settings.RSC_MEMBER_RETENTION_MS = WEEK_MS + 1
    messages = check_rsc_settings()
    assert error_ids(messages) == ["rsc.E005"]
    assert "RSC_MEMBER_RETENTION_MS" in messages[0].msg


def permissive(settings) -> None:
    """Settings where every cross-check passes, so only a range can be violated."""
    settings.RSC_TICK_INTERVAL_MS = 50
    settings.RSC_MEMBER_LEASE_TTL_MS = 3_600_000
    settings.RSC_HEARTBEAT_INTERVAL_MS = 100
    settings.RSC_REVOCATION_TIMEOUT_MS = 1_000
    settings.RSC_MEMBER_RETENTION_MS = WEEK_MS


@pytest.mark.parametrize("name", sorted(GROUP_DEFAULT_FIELDS))
def test_group_default_ranges_agree_with_group_config(settings, name: str) -> None:
    """The check accepts a group default exactly when GroupConfig.validated() does (its bounds live in
    coordinator/protocol/model.py; RANGES_MS copies them and this test keeps the copy honest)."""
    low, high, _ = RANGES_MS[name]
    field = GROUP_DEFAULT_FIELDS[name]
    for value, accepted in [(low - 1, False), (low, True), (high, True), (high + 1, False)]:
        permissive(settings)
        setattr(settings, name, value)
        ids = error_ids(check_rsc_settings())
        assert ids == ([] if accepted else ["rsc.E005"]), (name, value, ids)
        config = default_config_from_settings(settings)
        if accepted:
            config.validated()
        else:
            with pytest.raises(InvalidRequest) as error:
                config.validated()
            assert error.value.details["field"] == field


def test_the_default_settings_make_a_valid_group_config(settings) -> None:
    config = default_config_from_settings(settings).validated()
    assert config == replace(GroupConfig(), max_concurrency=config.max_concurrency)


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


# ---------------------------------------------------------------------------- rsc.W001 (check --deploy)


def test_short_environment_tokens_are_reported_by_check_deploy_only(settings) -> None:
    settings.RSC_MEMBER_TOKENS = ["dev-member-token", "m" * MIN_TOKEN_LENGTH]
    settings.RSC_ADMIN_TOKENS = ["dev-admin-token"]
    messages = check_api_tokens()
    assert [(m.id, m.level) for m in messages] == [("rsc.W001", checks.WARNING)] * 2
    assert [m.msg.split(" ")[0] for m in messages] == ["RSC_MEMBER_TOKENS[0]", "RSC_ADMIN_TOKENS[0]"]
    assert all("dev-" not in m.msg for m in messages)  # a token never appears in a message

    assert check_api_tokens in checks.registry.registry.get_checks(include_deployment_checks=True)
    assert check_api_tokens not in checks.registry.registry.get_checks()
    call_command("check")  # the development setup is not disturbed
    with pytest.raises(SystemCheckError, match=r"rsc\.W001"):
        call_command("check", deploy=True, tags=["security"], fail_level="WARNING")


def test_long_or_no_environment_tokens_pass(settings) -> None:
    settings.RSC_MEMBER_TOKENS = []
    settings.RSC_ADMIN_TOKENS = ["a" * MIN_TOKEN_LENGTH]
    assert check_api_tokens() == []


# ---------------------------------------------------------------------------- rsc.W002 (check --deploy)


def test_unscoped_environment_member_tokens_are_reported_by_check_deploy(settings) -> None:
    settings.RSC_MEMBER_TOKENS = ["m" * MIN_TOKEN_LENGTH]
    messages = check_unscoped_member_tokens()
    assert [(m.id, m.level) for m in messages] == [("rsc.W002", checks.WARNING)]
    assert "create_api_credential" in messages[0].hint
    assert check_unscoped_member_tokens in checks.registry.registry.get_checks(include_deployment_checks=True)
    assert check_unscoped_member_tokens not in checks.registry.registry.get_checks()
    settings.RSC_MEMBER_TOKENS = ["", ""]
    assert check_unscoped_member_tokens() == []


@pytest.mark.parametrize(("name", "value"), [("RSC_HEARTBEAT_FLOOR_MS", -1), ("RSC_HEARTBEAT_BURST", 0)])
def test_heartbeat_floor_settings_out_of_range_are_errors(settings, name: str, value: int) -> None:
    setattr(settings, name, value)
    assert [m.id for m in check_rsc_settings()] == ["rsc.E006"]


def test_a_cluster_broker_url_is_an_error(settings) -> None:
    from coordinator.checks import check_celery_broker

    settings.CELERY_BROKER_URL = "redis+cluster://10.0.0.1:7000/"
    assert [m.id for m in check_celery_broker()] == ["rsc.E007"]
    settings.CELERY_BROKER_URL = "redis://10.0.0.9:6379/1"
    assert check_celery_broker() == []


def test_the_trusted_proxy_header_must_be_a_header_name(settings) -> None:
    from coordinator.checks import check_trusted_proxy_header

    assert check_trusted_proxy_header() == []
    for good in ("X-Forwarded-For", "X-Real-IP", "HTTP_X_FORWARDED_FOR"):
        settings.RSC_TRUSTED_PROXY_HEADER = good
        assert check_trusted_proxy_header() == []
    for bad in ("X-Forwarded-For: 1.2.3.4", "X Forwarded", "-x"):
        settings.RSC_TRUSTED_PROXY_HEADER = bad
        assert [e.id for e in check_trusted_proxy_header()] == ["rsc.E008"]
    settings.RSC_TRUSTED_PROXY_HEADER = "X-Forwarded-For"
    settings.RSC_TRUSTED_PROXY_COUNT = 0
    assert "rsc.E006" in [e.id for e in check_rsc_settings()]
