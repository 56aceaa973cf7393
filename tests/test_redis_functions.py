"""The data plane's Redis Functions library from the coordinator's side (coordinator/store/functions.py):
``manage.py redis_functions load|check|prune|show``, loading at the coordinator's start and on every
tick, versions side by side, and ``manage.py redis_acl``. Real private Redis (tests/conftest.py)."""

from __future__ import annotations

import io
import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.core.management.base import CommandError

from consumers.dataplane import library
from coordinator import service
from coordinator.store import get_store, reset_store
from coordinator.store.functions import DataPlaneFunctions, keys_from_settings
from rsc_redis import acl, functions
from rsc_redis.dead_letter_mac import MacKeys

NAME = library.library().name
OLD = "rsc_000000000000"  # a library of another code version, as a rolling upgrade leaves it
OLD_TEXT = (
    f"#!lua name={OLD}\nredis.register_function{{function_name = '{OLD}_version', "
    "callback = function() return 'old' end, flags = {'no-writes'}}"
)


@pytest.fixture
def admin(settings: Any, redis_url: str) -> Iterator[redis.Redis]:
    settings.REDIS_URL = redis_url
    reset_store()
    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield client
    client.close()
    reset_store()


def run(*argv: str) -> str:
    out = io.StringIO()
    call_command("redis_functions", *argv, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def libraries(admin: redis.Redis) -> list[str]:
    return sorted(row[1].decode() for row in admin.function_list())


def test_check_load_and_show(admin: redis.Redis) -> None:
    assert run("check").strip().endswith(f"{NAME} ok")
    admin.function_delete(NAME)
    with pytest.raises(CommandError, match=r"missing or stale .*redis_functions load"):
        run("check")
    assert "loaded " + NAME in run("load")
    assert libraries(admin) == [NAME]
    assert "ok" in run("check")
    shown = run("show").split()
    assert shown[:2] == ["library", NAME]
    assert f"{NAME}_fetch" in shown and f"{NAME}_produce" in shown and f"{NAME}_version" in shown
    assert "DLQ_MAC" not in run("show") and keys_from_settings()[0].inner not in run("show")


def test_check_sees_a_library_rendered_with_other_keys_and_the_tick_replaces_it(admin: redis.Redis) -> None:
    """A rotated RSC_DEAD_LETTER_SECRET (or SECRET_KEY): the loaded library signs with keys this
    coordinator no longer signs with. check says so; the tick loads the current rendering."""
    admin.function_load(library.render(MacKeys.derive("another secret")), replace=True)
    with pytest.raises(CommandError):
        run("check")
    service.run_tick()
    assert "ok" in run("check")


def test_the_tick_and_the_coordinators_start_load_a_missing_library(
    admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """A flushed or restarted Redis, a new node: the coordinator heals it within a tick."""
    caplog.set_level(logging.WARNING, logger="coordinator")
    admin.function_flush()
    get_store()  # the coordinator's start
    assert libraries(admin) == [NAME]
    admin.function_flush()
    service.run_tick()
    assert libraries(admin) == [NAME]
    loaded = f"loaded the data plane's Redis Functions library {NAME}"
    assert sum(loaded in r.message for r in caplog.records) == 2


def test_a_tick_that_cannot_load_the_library_logs_and_still_ticks(
    admin: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    store = get_store()
    caplog.set_level(logging.ERROR, logger="coordinator")
    broken = DataPlaneFunctions(store.client, lambda: (_ for _ in ()).throw(ValueError("no secret")))
    store.ticker.ensure_functions = lambda: broken.ensure_quietly("tick")
    store.tick()
    store.tick()  # logged once a minute at most
    assert [r.message.count("cannot load") for r in caplog.records] == [1]


def test_versions_side_by_side_and_prune(admin: redis.Redis) -> None:
    """Loading this version never replaces another (its name differs): old and new members run side by
    side. prune removes the others once none of their processes runs."""
    admin.function_load(OLD_TEXT)
    run("load")
    assert libraries(admin) == [OLD, NAME]
    assert f"other versions loaded: {OLD}" in run("check")
    assert admin.fcall_ro(f"{OLD}_version", 0) == b"old"
    assert run("prune", "--keep", OLD).strip().endswith("deleted nothing")
    assert f"deleted {OLD}" in run("prune")
    assert libraries(admin) == [NAME]


def test_the_library_is_named_after_its_template_not_its_keys() -> None:
    one, two = library.render(MacKeys.derive("a")), library.render(MacKeys.derive("b"))
    assert one != two
    assert one.splitlines()[0] == two.splitlines()[0] == f"#!lua name={NAME}"
    assert MacKeys.derive("a").inner not in library.library().template
    assert functions.LIBRARY_PREFIX + library.library().digest == NAME
    with pytest.raises(ValueError, match="hex"):
        library.library().render({"DLQ_MAC_INNER": "x' .. evil .. '", "DLQ_MAC_OUTER": "00"}, "00")


def test_redis_acl_prints_users_that_redis_loads(admin: redis.Redis) -> None:
    out = io.StringIO()
    call_command(
        "redis_acl",
        "tenant-members:member:orders,payments",
        "tenant-producer:producer:orders",
        "rsc-coordinator:coordinator",
        "--format",
        "setuser",
        stdout=out,
    )
    lines = out.getvalue().splitlines()
    assert len(lines) == 3
    assert lines[0].startswith("ACL SETUSER tenant-members reset on >${TENANT_MEMBERS_PASSWORD} ")
    rules = acl.rules_for(acl.MEMBER, ["orders", "payments"])
    assert lines[0] == acl.setuser_command("tenant-members", ">${TENANT_MEMBERS_PASSWORD}", rules)
    digest = "ab" * 32
    out = io.StringIO()
    call_command("redis_acl", "t:producer:orders", "--password-sha256", f"t={digest}", stdout=out)
    (line,) = out.getvalue().splitlines()
    assert line == acl.aclfile_line("t", f"#{digest}", acl.rules_for(acl.PRODUCER, ["orders"]))
    admin.execute_command("ACL", "SETUSER", "t", *line.split()[2:])  # Redis takes it as it is
    try:
        assert admin.acl_getuser("t")["keys"] == [
            "~rsc:{orders}:meta",
            "~rsc:{orders}:v[0-9]*",
            "~rsc:{orders}:once",
            "~rsc:{orders}:once:prev",
        ]
    finally:
        admin.acl_deluser("t")
    for bad in (["x:member:a:b"], ["x:root"], ["x:coordinator:orders"], ["x:member:bad}prefix"]):
        with pytest.raises(CommandError):
            call_command("redis_acl", *bad, stdout=io.StringIO())


def test_a_member_or_producer_facing_only_another_versions_library_is_told_to_load_its_own(
    admin: redis.Redis,
) -> None:
    """Stale: a coordinator of an older (or newer) version loaded its library, not this one's. The start
    check of members and producers (FCALL_RO of this version's version function) fails, naming the
    command; it passes once this version's library is loaded beside the other."""
    from consumers.dataplane import redis_client
    from consumers.errors import FunctionsNotLoaded

    admin.function_flush()
    admin.function_load(OLD_TEXT)
    client = redis_client(f"redis://127.0.0.1:{admin.connection_pool.connection_kwargs['port']}/0")
    try:
        stale = rf"{NAME} of this code version is not loaded.*another version"
        with pytest.raises(FunctionsNotLoaded, match=stale):
            library.require_loaded(client)
        run("load")
        library.require_loaded(client)
        assert libraries(admin) == [OLD, NAME]
    finally:
        client.close()
