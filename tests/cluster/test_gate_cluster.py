"""The gate module (rsc_redis/module/rsc_gate.c) on a real Redis Cluster: a gate call is routed by its
keys like FCALL. Redis 7.0 routes a module command by its getkeys callback, not by its key spec, so a
gate without one would run a call on a node that does not serve its slot (and fail inside) instead of
answering MOVED / ASK."""

from __future__ import annotations

import pytest
import redis

from consumers.dataplane import library
from rsc_redis import module
from rsc_redis.keys import meta_key
from tests.cluster.harness import LocalCluster
from tests.cluster.helpers import slot_of_prefix


@pytest.mark.parametrize("command", [module.FCALL_MEMBER, "FCALL"])
def test_a_gate_call_on_a_node_without_its_slot_is_answered_moved_as_fcall_is(
    cluster_url: str, local_cluster: LocalCluster, command: str
) -> None:
    prefix = "gate"
    keys = [meta_key(prefix), f"rsc:{{{prefix}}}:v1:0", f"rsc:{{{prefix}}}:lr"]
    call = [library.function_name("read_new"), len(keys), *keys, "g", "m", "1", "v1:0", "1"]
    owner = local_cluster.server_for_slot(slot_of_prefix(prefix))
    for server in local_cluster.primaries():
        with local_cluster.node(server) as node:
            if server.port == owner.port:
                assert node.execute_command(command, *call) == ["MEMBER_FENCED"]  # ran: the fence refused
                assert node.command_getkeys(command, *call) == keys
            else:
                with pytest.raises(redis.exceptions.MovedError, match=f"{slot_of_prefix(prefix)} "):
                    node.execute_command(command, *call)
