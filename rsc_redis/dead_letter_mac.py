"""The MAC of a dead letter, in Python: what ``rsc_redis/dead_letter_mac.lua`` computes inside the data
plane's ``dead_letter`` function, checked here by the coordinator before a replay and on the operator
pages (docs/protocol.md section 14, "Dead letters the coordinator can trust").

Why: a member's Redis user must be allowed ``XADD`` on the dead-letter streams, because the
``dead_letter`` function runs ``XADD`` as that user (Redis checks a function's commands against the
caller's ACL). So the user can also append any fields there with a plain ``XADD``, and an operator's
replay would copy them into the active shards. The function therefore signs every copy it writes with
keys only the coordinator knows (it renders them into the library it loads; members cannot read the
library's code), and the coordinator replays only what verifies.

The keys: ``inner`` and ``outer``, 64 hex digits each, derived from one secret (the coordinator's
``RSC_DEAD_LETTER_SECRET`` setting, by default derived from Django's ``SECRET_KEY``) with HMAC-SHA256,
and a ``key_id`` (16 hex digits of a SHA-256 over both) that the library's version function reports, so
the coordinator can tell a library rendered with other keys (a rotated secret) and load it again.
Knowing the key id does not help to find the keys (a SHA-256 preimage of 512 random bits).

Pure: no Redis, no Django.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

FIELD = "dlq_mac"
_FIELD = FIELD.encode()


@dataclass(frozen=True, slots=True)
class MacKeys:
    """The two keys of the dead-letter MAC (lower-case hex)."""

    inner: str
    outer: str

    @classmethod
    def derive(cls, secret: str | bytes) -> MacKeys:
        raw = secret.encode() if isinstance(secret, str) else bytes(secret)
        if not raw:
            raise ValueError("the dead-letter MAC needs a non-empty secret")
        return cls(
            inner=hmac.new(raw, b"rsc dead-letter mac: inner key", hashlib.sha256).hexdigest(),
            outer=hmac.new(raw, b"rsc dead-letter mac: outer key", hashlib.sha256).hexdigest(),
        )

    @property
    def key_id(self) -> str:
        return hashlib.sha256(f"rsc dead-letter key id {self.inner} {self.outer}".encode()).hexdigest()[:16]

    def placeholders(self) -> dict[str, str]:
        """The values of the library template's placeholders (rsc_redis/dead_letter_mac.lua)."""
        return {"DLQ_MAC_INNER": self.inner, "DLQ_MAC_OUTER": self.outer}

    def mac(self, key: str | bytes, flat: Sequence[bytes | str]) -> str:
        """The MAC of a copy written to the stream ``key`` with the fields ``flat`` (name, value, ...)."""
        inner = hashlib.sha1(self.inner.encode() + encode(key, flat)).hexdigest()
        return hashlib.sha1(self.outer.encode() + inner.encode()).hexdigest()


def encode(key: str | bytes, flat: Sequence[bytes | str]) -> bytes:
    """The netstrings of ``key`` and of every item of ``flat``: ``<length>:<bytes>,`` each."""
    parts = []
    for item in (key, *flat):
        data = item.encode() if isinstance(item, str) else bytes(item)
        parts.append(b"%d:%s," % (len(data), data))
    return b"".join(parts)


class Verdict(StrEnum):
    """What the coordinator makes of a dead letter."""

    SIGNED = "SIGNED"  # written by the dead_letter function (its MAC verifies)
    UNSIGNED = "UNSIGNED"  # no dlq_mac field: written before dead letters were signed, or by hand
    FORGED = "FORGED"  # a dlq_mac that does not verify (or not the last field): not the function's


def verify(keys: Sequence[MacKeys], key: str | bytes, fields: Mapping[bytes, bytes]) -> Verdict:
    """The verdict on a dead letter of the stream ``key`` whose fields are ``fields`` as redis-py
    returns an entry (a dict in the entry's order; a repeated name keeps its first position and its
    last value). ``keys``: the current keys first, then those of earlier secrets still accepted.

    ``dlq_mac`` must be the last field and the MAC of every field before it. An entry with a repeated
    field name cannot verify (its dict lost a pair the MAC covers), so it is refused too: the function
    never writes one unless the source entry had such names, which no producer function writes."""
    names = list(fields)
    if _FIELD not in fields and FIELD not in fields:
        return Verdict.UNSIGNED
    if names[-1] not in (_FIELD, FIELD):
        return Verdict.FORGED
    value = fields[names[-1]]
    claimed = value if isinstance(value, bytes) else str(value).encode()
    flat: list[bytes | str] = []
    for name in names[:-1]:
        flat += [name, fields[name]]
    for candidate in keys:
        if hmac.compare_digest(candidate.mac(key, flat).encode(), claimed):
            return Verdict.SIGNED
    return Verdict.FORGED
