"""Member ids, @listener, the runtime component and the worker pool: the pure(ish) parts of the runtime."""

from __future__ import annotations

import threading
from typing import Any

import pytest

import consumers
from consumers.listener import (
    Listener,
    ListenerConfigError,
    ListenerRegistry,
    apply_concurrency_overrides,
    listener,
    parse_concurrency,
)
from consumers.member.ids import MEMBER_ID_RE, make_member_id
from consumers.member.pool import PoolClosed, WorkerPool
from consumers.runtime import Runtime, RuntimeConfigError, load_runtime
from tests.consumers.harness import eventually

# ------------------------------------------------------------------------------------------ member ids


def test_a_member_id_is_host_pid_listener_index_and_a_random_suffix() -> None:
    assert make_member_id("bill", 2, host="10.1.2.3", pid=77, suffix="abcd") == "10.1.2.3-77-bill-2-abcd"


def test_member_ids_are_unique_per_start() -> None:
    assert make_member_id("bill", 0, host="h", pid=1) != make_member_id("bill", 0, host="h", pid=1)


@pytest.mark.parametrize(
    ("host", "listener", "expected_start"),
    [
        ("fe80::1%eth0", "bill", "fe80--1-eth0-"),
        ("::1", "bill", "h--1-"),
        ("10.0.0.1", "my listener:{x}", "10.0.0.1-5-my-listener--x--0-"),
        ("", "bill", "host-"),
        ("_pod", "bill", "h_pod-"),
    ],
)
def test_member_ids_are_sanitized(host: str, listener: str, expected_start: str) -> None:
    member_id = make_member_id(listener, 0, host=host, pid=5, suffix="ff")
    assert member_id.startswith(expected_start)
    assert MEMBER_ID_RE.match(member_id)


def test_a_long_listener_name_is_shortened_to_fit_128_characters_keeping_index_and_suffix() -> None:
    member_id = make_member_id("x" * 300, 12, host="a" * 100, pid=123456, suffix="deadbeef")
    assert len(member_id) == 128
    assert member_id.endswith("-12-deadbeef")
    assert MEMBER_ID_RE.match(member_id)


def test_the_host_comes_from_pod_ip(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("POD_IP", "2001:db8::7")
    assert make_member_id("bill", 0, pid=1, suffix="s") == "2001-db8--7-1-bill-0-s"


# ------------------------------------------------------------------------------------------ @listener


def test_listener_with_arguments_returns_a_callable_listener() -> None:
    registry = ListenerRegistry()

    @listener(stream_prefix="orders", consumer_group="billing", concurrency="3", registry=registry)
    def bill(entry: Any) -> str:
        """Bills an order."""
        return f"billed {entry}"

    assert isinstance(bill, Listener)
    assert bill("e1") == "billed e1"
    assert (bill.name, bill.stream_prefix, bill.consumer_group, bill.concurrency) == (
        "bill",
        "orders",
        "billing",
        3,
    )
    assert bill.__doc__ == "Bills an order."
    assert registry.get("bill") is bill
    assert registry.select([]) == [bill]


def test_the_bare_form_is_refused_with_a_clear_message() -> None:
    with pytest.raises(ListenerConfigError, match="needs arguments"):

        @listener
        def bill(entry: Any) -> None: ...


def test_group_identity_is_required() -> None:
    with pytest.raises(ListenerConfigError, match="stream_prefix= and consumer_group="):
        listener(stream_prefix="orders")  # type: ignore[call-overload]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"concurrency": "three"}, "concurrency must be an integer"),
        ({"concurrency": 0}, "concurrency must be an integer"),
        ({"concurrency": 1025}, "concurrency must be an integer"),
        ({"concurrency": True}, "concurrency must be an integer"),
        ({"concurrency": 2.0}, "concurrency must be an integer"),
        ({"concurrency": "2.5"}, "concurrency must be an integer"),
        ({"stream_prefix": "or:ders"}, "stream_prefix must be"),
        ({"consumer_group": "-billing"}, "consumer_group must be"),
        ({"consumer_group": "b" * 65}, "consumer_group must be"),
        ({"name": "bad name"}, "listener name must be"),
    ],
)
def test_options_are_validated_when_the_decorator_runs(kwargs: dict[str, Any], message: str) -> None:
    options = {
        "stream_prefix": "orders",
        "consumer_group": "billing",
        "registry": ListenerRegistry(),
        **kwargs,
    }

    def handler(entry: Any) -> None: ...

    with pytest.raises(ListenerConfigError, match=message):
        listener(**options)(handler)


def test_a_lambda_needs_a_name() -> None:
    with pytest.raises(ListenerConfigError, match="pass name="):
        Listener(lambda e: None, stream_prefix="orders", consumer_group="billing")
    named = Listener(lambda e: None, stream_prefix="orders", consumer_group="billing", name="anon")
    assert named.name == "anon"


@pytest.mark.parametrize(("value", "expected"), [(1, 1), ("4", 4), (" 7 ", 7), (1024, 1024)])
def test_concurrency_accepts_ints_and_numeric_strings(value: object, expected: int) -> None:
    assert parse_concurrency(value, "x") == expected


def test_one_name_cannot_be_declared_by_two_functions_but_a_redeclaration_replaces() -> None:
    registry = ListenerRegistry()

    def make(module: str) -> Any:
        def bill(entry: Any) -> None: ...

        bill.__module__ = module
        return bill

    first = registry.register(
        Listener(make("app.listeners"), stream_prefix="orders", consumer_group="billing")
    )
    again = registry.register(
        Listener(make("app.listeners"), stream_prefix="orders", consumer_group="billing")
    )
    assert registry.get("bill") is again is not first
    with pytest.raises(ListenerConfigError, match="declared twice"):
        registry.register(Listener(make("other.listeners"), stream_prefix="orders", consumer_group="billing"))


def test_selecting_an_unknown_listener_names_the_known_ones() -> None:
    registry = ListenerRegistry()
    registry.register(Listener(lambda e: None, stream_prefix="o", consumer_group="g", name="bill"))
    with pytest.raises(ListenerConfigError, match=r"no listener named 'ship' \(declared: bill\)"):
        registry.select(["ship"])


def test_settings_override_the_fan_out_per_listener_name() -> None:
    bill = Listener(lambda e: None, stream_prefix="o", consumer_group="billing", name="bill", concurrency=3)
    ship = Listener(lambda e: None, stream_prefix="o", consumer_group="shipping", name="ship")
    result = apply_concurrency_overrides([bill, ship], {"bill": "5", "nobody": 2})
    assert [(x.name, x.concurrency) for x in result] == [("bill", 5), ("ship", 1)]
    assert bill.concurrency == 3  # the declaration itself is unchanged
    with pytest.raises(ListenerConfigError, match=r"RSC_LISTENER_CONCURRENCY\['bill'\]"):
        apply_concurrency_overrides([bill], {"bill": "lots"})


def test_the_package_exports_the_decorator_not_the_module() -> None:
    from consumers import listener as exported

    assert exported is listener
    assert consumers.Runtime is Runtime
    assert callable(consumers.run)


# ------------------------------------------------------------------------------------------ runtime


def test_runtime_from_a_dict_a_factory_path_or_an_instance() -> None:
    assert load_runtime(None) == Runtime()
    assert load_runtime({"max_concurrency": 4}).max_concurrency == 4
    runtime = Runtime(max_concurrency=2)
    assert load_runtime(runtime) is runtime
    assert load_runtime("tests.consumers.test_declarations.runtime_factory").max_concurrency == 7


def runtime_factory() -> Runtime:
    return Runtime(max_concurrency=7)


def not_a_runtime() -> object:
    return {"max_concurrency": 7}


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ({"max_concurrency": 0}, "max_concurrency must be an integer"),
        ({"max_concurrency": "4"}, "max_concurrency must be an integer"),
        ({"max_concurency": 4}, "unknown keys"),
        ({"idle_backoff_min_ms": 50, "idle_backoff_max_ms": 10}, "idle_backoff_max_ms"),
        ({"freeze_heap": "yes"}, "freeze_heap must be True or False"),
        ("nowhere.factory", "cannot be imported"),
        ("factory", "not a dotted path"),
        ("tests.consumers.test_declarations.not_a_runtime", "not a consumers.Runtime"),
        (4, "must be a dict"),
    ],
)
def test_bad_runtime_settings_are_refused(setting: Any, message: str) -> None:
    with pytest.raises(RuntimeConfigError, match=message):
        load_runtime(setting)


# ------------------------------------------------------------------------------------------ the pool


def test_the_pool_bounds_how_many_batches_run_and_resizes_without_interrupting_them() -> None:
    pool = WorkerPool("t")
    gate, running = threading.Event(), threading.Semaphore(0)
    results: list[int] = []

    def task(n: int) -> None:
        running.release()
        assert gate.wait(10)
        results.append(n * 2)

    pool.resize(3)
    threads = [threading.Thread(target=pool.run, args=(task, n)) for n in range(4)]
    for t in threads:
        t.start()
    for _ in range(3):
        assert running.acquire(timeout=10)  # three at once: three slots
    assert not running.acquire(timeout=0.2) and pool.running == 3  # the fourth waits
    pool.resize(1)
    assert pool.size == 1
    gate.set()
    for t in threads:
        t.join(10)
    assert sorted(results) == [0, 2, 4, 6] and pool.running == 0  # none was interrupted
    assert pool.run(lambda: "ok") == "ok"  # on the calling thread
    pool.shutdown()


def test_slots_go_in_the_order_they_were_asked_for() -> None:
    pool = WorkerPool("t")
    order: list[int] = []
    waiting = [threading.Thread(target=pool.run, args=(order.append, n)) for n in range(5)]
    for n, t in enumerate(waiting, 1):
        t.start()
        eventually(lambda n=n: len(pool._waiting) == n, what="queued")  # type: ignore[misc]
    pool.resize(1)
    for t in waiting:
        t.join(10)
    assert order == [0, 1, 2, 3, 4]


def test_a_pool_of_zero_makes_batches_wait_and_shutdown_refuses_them() -> None:
    pool = WorkerPool("t")
    refused: list[BaseException] = []

    def wait() -> None:
        try:
            pool.run(lambda: None)
        except PoolClosed as e:
            refused.append(e)

    t = threading.Thread(target=wait)
    t.start()
    eventually(lambda: len(pool._waiting) == 1, what="waiting for a slot")
    pool.shutdown()
    t.join(10)
    assert len(refused) == 1
    with pytest.raises(PoolClosed):
        pool.run(lambda: 1)


def test_a_batch_exception_is_the_callers_and_frees_its_slot() -> None:
    pool = WorkerPool("t")
    pool.resize(1)

    def boom() -> None:
        raise ValueError("x")

    with pytest.raises(ValueError):
        pool.run(boom)
    assert pool.running == 0 and pool.run(lambda: 3) == 3
    pool.shutdown()


def test_a_member_id_prefix_starts_every_id(settings: Any) -> None:
    """For credentials scoped to a member-id prefix (manage.py create_api_credential --member-id-prefix)."""
    member_id = make_member_id("bill", 1, host="::1", pid=7, suffix="ab", prefix="orders-")
    assert member_id == "orders---1-7-bill-1-ab"
    settings.RSC_MEMBER_ID_PREFIX = "billing."
    member_id = make_member_id("x" * 300, 3, host="10.0.0.2", pid=9, suffix="cd")
    assert member_id.startswith("billing.10.0.0.2-9-") and member_id.endswith("-3-cd")
    assert len(member_id) == 128 and MEMBER_ID_RE.match(member_id)
