"""Which database the suite runs on: SQLite by default, the private PostgreSQL in `make test`'s second
pass (python -m tests.postgres). A pass that silently fell back to SQLite would prove nothing."""

from __future__ import annotations

import os

import pytest
from django.db import connection


@pytest.mark.django_db
def test_the_suite_runs_on_the_database_it_was_given() -> None:
    url = os.environ.get("DATABASE_URL", "")
    expected = "postgresql" if url.startswith(("postgres://", "postgresql://")) else "sqlite"
    assert connection.vendor == expected
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)
