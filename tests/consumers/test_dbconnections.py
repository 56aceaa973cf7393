"""The batch hook of run_member (consumers/dbconnections.py): a worker thread that has opened a database
connection gets Django's close_old_connections after its batches; one that never did has nothing to
look for, and the hook opens nothing."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from consumers import dbconnections
from consumers.dbconnections import close_old_connections


def in_a_thread(work: Callable[[], Any]) -> Any:
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(work()))
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and result, "the thread did not finish"
    return result[0]


@pytest.mark.django_db(transaction=True)
def test_only_a_thread_with_a_connection_looks_for_stale_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    checked: list[str] = []
    original = BaseDatabaseWrapper.close_if_unusable_or_obsolete

    def spy(self: BaseDatabaseWrapper) -> None:
        checked.append(threading.current_thread().name)
        original(self)

    monkeypatch.setattr(BaseDatabaseWrapper, "close_if_unusable_or_obsolete", spy)
    searches: list[str] = []
    django_hook = dbconnections._django_close_old_connections

    def counted() -> None:
        searches.append(threading.current_thread().name)
        django_hook()

    monkeypatch.setattr(dbconnections, "_django_close_old_connections", counted)

    def without_the_database() -> bool:
        close_old_connections()
        close_old_connections()
        return hasattr(connections._connections, "default")  # did the hook open one?

    assert in_a_thread(without_the_database) is False
    assert checked == [] and searches == []  # not even a search for one

    def with_the_database() -> str:
        close_old_connections()  # before the first batch: nothing opened yet
        with connections["default"].cursor() as cursor:  # the handler's query
            cursor.execute("SELECT 1")
        close_old_connections()  # after the batch
        close_old_connections()  # before the next one
        return threading.current_thread().name

    name = in_a_thread(with_the_database)
    assert searches == [name, name]  # Django's own hook, every call once the thread connected
    assert checked == [name, name]
