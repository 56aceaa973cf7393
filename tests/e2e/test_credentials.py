"""Credential changes across real processes: a deactivation made by another process (manage.py, as the
Django admin would) is refused by every API worker process from the next request, not within the cache's
5 s (docs/protocol.md section 13, "Credentials and scopes")."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from typing import Any

from tests.polling import wait_until

from .stack import GROUP, PREFIX, REPO, Api, Stack, live, stable_and_balanced


def manage(stack: Stack, *argv: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *argv], cwd=REPO, env=stack.env(), check=True, timeout=60,
        capture_output=True, text=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_a_deactivation_in_another_process_is_refused_by_every_worker_at_once(
    make_stack: Callable[..., Stack],
) -> None:
    # A cache limit far beyond the test: only the shared generation can make the workers refuse.
    stack = make_stack(api_workers=2, api_threads=2, env={"RSC_CREDENTIAL_CACHE_S": "600"})
    stack.create_group(shard_count=2)
    token = manage(stack, "create_api_credential", "workers", "--role", "member", "--stream-prefixes", "*")
    member = Api(stack.api_port, token=token)
    # Every worker has the credential cached: many fresh connections spread over both workers.
    statuses = {member.call("GET", "routing/e2e")[0] for _ in range(40)}
    assert statuses == {200}, statuses

    deactivate = (
        "from coordinator.models import ApiCredential as C; c = C.objects.get(name='workers'); "
        "c.active = False; c.save()"
    )
    manage(stack, "shell", "-c", deactivate)
    refused: list[Any] = [member.call("GET", "routing/e2e")[0] for _ in range(40)]
    assert set(refused) == {401}, refused


def test_a_member_runs_on_a_scoped_credential_and_cannot_leave_its_scope(
    make_stack: Callable[..., Stack],
) -> None:
    """The scoped credential of docs/protocol.md section 13 with a real run_member: ids made with
    RSC_MEMBER_ID_PREFIX, owned by the credential; another credential cannot evict the member."""
    stack = make_stack()
    stack.create_group(shard_count=2, heartbeat_interval_ms=200, lease_ttl_ms=2_000)
    token = manage(
        stack, "create_api_credential", "e2e-workers", "--role", "member",
        "--stream-prefixes", "e2e", "--groups", "e2e-*", "--member-id-prefix", "team-e2e.",
    )  # fmt: skip
    stack.start_member("m0", RSC_MEMBER_TOKEN=token, RSC_MEMBER_ID_PREFIX="team-e2e.")
    view = wait_until(
        stack.describe, lambda v: stable_and_balanced(v, 1, 2), what="the scoped member owns both"
    )
    (member,) = live(view)
    assert member["member_id"].startswith("team-e2e.")

    other = Api(stack.api_port, token=manage(stack, "create_api_credential", "other", "--role", "member"))
    status, problem = other.call(
        "POST", f"groups/{PREFIX}/{GROUP}/heartbeat", {"member_id": member["member_id"], "member_epoch": -1}
    )
    assert (status, problem["code"]) == (403, "MEMBER_ID_NOT_OWNED")
    assert [m["member_id"] for m in live(stack.describe())] == [member["member_id"]]
