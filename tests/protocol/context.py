"""A scripted test context over the pure core (after Kafka's GroupMetadataManagerTestContext).

Time is a number the test moves; every call goes through ``apply`` exactly as the store does.
"""

from __future__ import annotations

from coordinator.protocol.commands import (
    ChangeShardCount,
    Command,
    CreateGroup,
    DeleteGroup,
    MemberHeartbeat,
    ReleaseDrain,
    ReportDrained,
    SetMaxConcurrency,
    SetRetention,
    Tick,
    TickReport,
    apply,
)
from coordinator.protocol.describe import HeartbeatResponse
from coordinator.protocol.group import Heartbeat
from coordinator.protocol.model import (
    Group,
    GroupConfig,
    Member,
    OrderingMode,
    PrefixState,
    RetentionPolicy,
    Shard,
)

PREFIX = "orders"
GROUP = "billing"


def shards(*names: str) -> frozenset[Shard]:
    return frozenset(Shard.parse(n) for n in names)


def names(items: object) -> list[str]:
    """Sorted wire names of shards, from a response's assignment or any iterable of shards."""
    result = []
    for item in items:  # type: ignore[attr-defined]
        shard = getattr(item, "shard", item)
        result.append(shard)
    return [str(s) for s in sorted(result)]


class Context:
    def __init__(self, shard_count: int = 4, **config: int) -> None:
        self.now = 0
        defaults = {"lease_ttl_ms": 10_000, "heartbeat_interval_ms": 1_000, "revocation_timeout_ms": 30_000}
        self.config = GroupConfig(**{**defaults, **config})
        self.state: PrefixState | None = None
        self.run(
            CreateGroup(
                stream_prefix=PREFIX, consumer_group=GROUP, shard_count=shard_count, config=self.config
            )
        )

    def run(self, command: Command) -> object:
        outcome = apply(self.state, command, self.now)
        self.state = outcome.state
        return outcome.result

    @property
    def group(self) -> Group:
        assert self.state is not None
        return self.state.groups[GROUP]

    def member(self, member_id: str) -> Member:
        return self.group.members[member_id]

    def heartbeat(
        self,
        member_id: str,
        epoch: int,
        owned: frozenset[Shard] | None = None,
        capacity: int | None = None,
        instance_id: str | None = None,
    ) -> HeartbeatResponse:
        hb = Heartbeat(
            member_id=member_id, member_epoch=epoch, owned=owned, capacity=capacity, instance_id=instance_id
        )
        result = self.run(MemberHeartbeat(stream_prefix=PREFIX, consumer_group=GROUP, heartbeat=hb))
        assert isinstance(result, HeartbeatResponse)
        return result

    def join(self, member_id: str, capacity: int = 4, instance_id: str | None = None) -> HeartbeatResponse:
        return self.heartbeat(member_id, 0, frozenset(), capacity, instance_id)

    def ack(self, response: HeartbeatResponse) -> HeartbeatResponse:
        """Heartbeat reporting exactly the shards of ``response`` (acknowledging any revocation)."""
        owned = frozenset(a.shard for a in response.shards)
        return self.heartbeat(response.member_id, response.member_epoch, owned)

    def tick(self, advance_ms: int = 0, **options: int) -> TickReport:
        self.now += advance_ms
        result = self.run(Tick(stream_prefix=PREFIX, **options))
        assert isinstance(result, TickReport)
        return result

    def reshard(self, shard_count: int, ordering: OrderingMode = OrderingMode.STRICT) -> None:
        self.run(ChangeShardCount(stream_prefix=PREFIX, shard_count=shard_count, ordering=ordering))

    def drained(self, *shard_names: str) -> None:
        self.run(ReportDrained(stream_prefix=PREFIX, consumer_group=GROUP, shards=shards(*shard_names)))

    def set_max_concurrency(self, value: int) -> None:
        self.run(SetMaxConcurrency(stream_prefix=PREFIX, consumer_group=GROUP, max_concurrency=value))

    def create_group(self, name: str) -> None:
        self.run(CreateGroup(stream_prefix=PREFIX, consumer_group=name, config=self.config))

    def delete_group(self, name: str) -> None:
        self.run(DeleteGroup(stream_prefix=PREFIX, consumer_group=name))

    def release_drain(self, group: str = GROUP) -> None:
        self.run(ReleaseDrain(stream_prefix=PREFIX, consumer_group=group))

    def release_drain_of(self, counted: frozenset[Shard], group: str = GROUP) -> None:
        """The release as the store commits it: naming the shards whose entries it counted."""
        self.run(ReleaseDrain(stream_prefix=PREFIX, consumer_group=group, shards=counted))

    def set_retention(self, **policy: int | None) -> None:
        self.run(SetRetention(stream_prefix=PREFIX, policy=RetentionPolicy(**policy)))  # type: ignore[arg-type]
