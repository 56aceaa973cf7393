"""Per-credential limits on joins: a join rate and a cap on live members, both kept in Redis so that
they hold across every API process (docs/protocol.md section 13, "Per credential").

Theory of operation
-------------------
A credential's *live members* are the member ids it joined (its identity is their ``owner``) that are
live in their group now (``m:<G>:<member>`` in the prefix's metadata: not left, expired or fenced, the
group not deleted), across every group and stream prefix. Counting them by reading every group would
cost a scan per join; instead each credential has a sorted set (``rsc_redis.keys.credential_members_key``,
keyed on the digest of its identity) of the members it joined, scored by when each was last known live:

* a join of a member id not in the set adds it, atomically with the count and the cap
  (``admit_join.lua``): two API processes admitting at once cannot both take the last place;
* a join the coordinator then refuses (GROUP_NOT_FOUND, MEMBER_ID_NOT_OWNED, a full group, ...) gives
  its place back (:meth:`CredentialLimits.release`), and so does a leave that succeeded;
* a member that ends otherwise (expired by the tick, fenced, its group deleted) stays in the set until
  the cap is reached. Then the members last known live more than :data:`TRUST_MS` ago are checked
  against their group's metadata (one ``HMGET`` of ``m:`` and ``d:`` each, pipelined; live means
  ``m:`` is there and ``d:`` names this credential as the owner), the gone ones dropped and the live
  ones known live as of now (``confirm_members.lua``), and the join is counted again.

So the count never misses a live member, and may include members that ended in the last
:data:`TRUST_MS` (it refuses a join a little early rather than ever admitting one too many). Joins
below the cap cost one script call; at the cap, at most the cap's worth of checks per :data:`TRUST_MS`
per credential. The set holds at most the cap (plus the joins admitted at the very same moment),
whatever the credential's history. With no cap (0) the set is neither kept nor read.

The join rate is a GCRA over every join of the credential (one per ``period_ms`` after ``burst`` back
to back), like the heartbeat floor over a member's heartbeats; a join it refuses is not counted. A
rejoin of a member already counted meets the rate but never the cap.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from coordinator.protocol.errors import CredentialJoinsTooFrequent, CredentialMemberLimitReached
from rsc_redis import keys as rkeys

from .codec import identity_digest
from .replies import text, translate_redis_errors

log = logging.getLogger(__name__)

# A member confirmed live less than this long ago is counted without a check.
TRUST_MS = 10_000
# Members checked per round at the cap (one pipelined HMGET each).
CHECK_BATCH = 500


@dataclass(frozen=True, slots=True)
class JoinLimits:
    """A credential's limits: ``max_members`` live members at once (0: none), one join per
    ``period_ms`` after ``burst`` back to back (``period_ms`` 0: no rate)."""

    max_members: int
    period_ms: int
    burst: int

    @property
    def off(self) -> bool:
        return self.max_members <= 0 and self.period_ms <= 0


@dataclass(frozen=True, slots=True)
class Admission:
    """A join the limits admitted. ``counted``: it added the member to the credential's count, which
    :meth:`CredentialLimits.release` takes back if the join is refused."""

    identity: str
    member: str  # "<P>:<G>:<member>"
    counted: bool


def member_ref(stream_prefix: str, consumer_group: str, member_id: str) -> str:
    return f"{stream_prefix}:{consumer_group}:{member_id}"


class CredentialLimits:
    """The store's part that admits joins per credential (see the module docstring)."""

    def __init__(self, client: Any) -> None:
        self.client = client
        here = Path(__file__).parent
        self._admit = client.register_script((here / "admit_join.lua").read_text())
        self._confirm = client.register_script((here / "confirm_members.lua").read_text())

    def admit(
        self, identity: str, stream_prefix: str, consumer_group: str, member_id: str, limits: JoinLimits
    ) -> Admission:
        """Admit a join by the credential ``identity``, or raise CredentialJoinsTooFrequent /
        CredentialMemberLimitReached (both change nothing; StoreUnavailable if Redis cannot say)."""
        digest = identity_digest(identity)
        keys = [rkeys.credential_members_key(digest), rkeys.credential_joins_key(digest)]
        ref = member_ref(stream_prefix, consumer_group, member_id)
        cap, period = max(0, limits.max_members), max(0, limits.period_ms)
        args = [ref, cap, period, max(1, limits.burst), TRUST_MS, CHECK_BATCH]
        count = cap
        with translate_redis_errors():
            for _round in range(cap // CHECK_BATCH + 2):
                reply = self._admit(keys=keys, args=args)
                status = int(reply[0])
                if status == 0:
                    return Admission(identity, ref, bool(int(reply[1])))
                if status == 1:
                    wait_ms = int(reply[1])
                    raise CredentialJoinsTooFrequent(
                        f"this credential joins members faster than one per {period} ms (after "
                        f"{limits.burst} back to back), counted over every API process: retry in "
                        f"{wait_ms} ms",
                        retry_after_ms=wait_ms,
                    )
                count = int(reply[1])
                if status == 3:
                    break
                self._check(identity, keys[0], reply[2:])
        wait_ms = max(1_000, TRUST_MS // 2 + random.randrange(max(1, TRUST_MS // 2)))  # spread retries
        raise CredentialMemberLimitReached(
            f"this credential already has {count} live members, its limit of {cap} across every group; "
            f"a new member id joins once one leaves or expires (retry in {wait_ms} ms)",
            limit=cap,
            live_members=count,
            retry_after_ms=wait_ms,
        )

    def release(self, admission: Admission) -> None:
        """Take back the place of a join that was refused after it was admitted (only if it took one)."""
        if admission.counted:
            self._forget(admission.identity, admission.member)

    def forget(self, identity: str, stream_prefix: str, consumer_group: str, member_id: str) -> None:
        """The member left: it no longer counts against its credential."""
        self._forget(identity, member_ref(stream_prefix, consumer_group, member_id))

    def _forget(self, identity: str, ref: str) -> None:
        # Best effort: a place not given back is found gone by the next check at the cap.
        try:
            with translate_redis_errors():
                self.client.zrem(rkeys.credential_members_key(identity_digest(identity)), ref)
        except Exception as e:
            log.warning("credential member %s not forgotten (%s); the next check at the cap will", ref, e)

    def _check(self, identity: str, key: str, flat: list[Any]) -> None:
        """Check members (``[member, score, ...]`` as admit_join.lua returns them) against the metadata
        and record what was found (confirm_members.lua)."""
        entries = [(text(flat[i]), text(flat[i + 1])) for i in range(0, len(flat) - 1, 2)]
        pipe = self.client.pipeline(transaction=False)
        asked: list[bool] = []
        for ref, _score in entries:
            parts = ref.split(":")
            if len(parts) == 3 and all(parts):
                prefix, group, member = parts
                pipe.hmget(rkeys.meta_key(prefix), f"m:{group}:{member}", f"d:{group}:{member}")
                asked.append(True)
            else:  # not a member reference this module wrote: never live
                asked.append(False)
        replies = iter(pipe.execute() if any(asked) else [])
        triples: list[str] = []
        for (ref, score), was_asked in zip(entries, asked, strict=True):
            live = was_asked and _live(next(replies), identity)
            triples += [ref, score, "1" if live else "0"]
        if triples:
            self._confirm(keys=[key], args=triples)


def _live(reply: Any, identity: str) -> bool:
    """``[m:, d:]`` of a member: live (``m:`` there) and still this credential's (``d:``'s owner; a
    group of the format without ``d:`` records cannot say otherwise, so it counts)."""
    epoch, record = reply
    if epoch is None:
        return False
    if record is None:
        return True
    try:
        owner = orjson.loads(record).get("owner", "")
    except (orjson.JSONDecodeError, AttributeError):
        return True  # unreadable: counted, never wrongly freed
    return bool(owner == identity)
