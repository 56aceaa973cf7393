"""Member ids: made by each member at start from its pod-IP context (docs/protocol.md section 1).

``<host>-<pid>-<listener>-<index>-<random>``, where host is ``$POD_IP`` or this host's address. The
coordinator accepts 1-128 characters of ``[A-Za-z0-9._-]`` starting with a letter or digit (no colons:
they would break the key layout), so anything else becomes ``-`` (an IPv6 ``fe80::1`` becomes
``fe80--1``) and the listener name is shortened when the whole would be too long. The random suffix
makes a restarted process (same pod IP, maybe the same pid) a new member rather than a rejoin.
"""

from __future__ import annotations

import functools
import os
import re
import secrets
import socket

MAX_MEMBER_ID_LENGTH = 128
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
MEMBER_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


def sanitize(text: str) -> str:
    return _UNSAFE.sub("-", text)


def host_address() -> str:
    """``$POD_IP`` if set, else the address this host's name resolves to, else the host name."""
    pod_ip = os.environ.get("POD_IP", "").strip()
    return pod_ip or _resolved_host()


@functools.cache
def _resolved_host() -> str:
    """Resolved once per process: a slow resolver must not delay every member's start."""
    name = socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name or "localhost"


def make_member_id(
    listener: str,
    index: int,
    *,
    host: str | None = None,
    pid: int | None = None,
    suffix: str | None = None,
    prefix: str | None = None,
) -> str:
    """``prefix`` (default: the setting ``RSC_MEMBER_ID_PREFIX``, "") starts the id: a credential
    scoped to a member-id prefix accepts only ids that start with it (docs/protocol.md section 13)."""
    if prefix is None:
        prefix = _configured_prefix()
    prefix = sanitize(prefix)[:64]
    host = sanitize(host if host is not None else host_address())[:64] or "host"
    if not prefix and not (host[0].isascii() and host[0].isalnum()):
        host = "h" + host  # an IPv6 "::1" would start the id with "-"
    pid = os.getpid() if pid is None else pid
    suffix = sanitize(suffix if suffix is not None else secrets.token_hex(4))[:16]
    fixed = f"{prefix}{host}-{pid}-"
    tail = f"-{index}-{suffix}"
    room = MAX_MEMBER_ID_LENGTH - len(fixed) - len(tail)
    member_id = fixed + sanitize(listener)[: max(room, 0)] + tail
    assert MEMBER_ID_RE.fullmatch(member_id), member_id
    return member_id


def make_instance_id(instance: str, listener: str, index: int) -> str:
    """The static instance id of member ``index`` of ``listener`` in a process given ``instance`` (a
    pod name: ``run_member --instance-id`` or ``RSC_INSTANCE_ID``; docs/consumers.md, "Static
    membership"): ``<instance>.<listener>.<index>``, so that a listener's N members, and the listeners of
    one process, have distinct instance ids, and the next process given the same ``instance`` has the
    same ones. ``ValueError`` when that is not a valid instance id (1-128 of ``[A-Za-z0-9._-]``, starting
    with a letter or digit)."""
    instance_id = f"{instance}.{sanitize(listener)}.{index}"
    if not MEMBER_ID_RE.fullmatch(instance_id):
        raise ValueError(
            f"instance id {instance_id!r} (from {instance!r}, listener {listener!r}, member {index}) is not "
            "1-128 characters of letters, digits, '.', '_' or '-' starting with a letter or digit: give "
            "a shorter instance id of those characters"
        )
    return instance_id


def _configured_prefix() -> str:
    from django.conf import settings

    from consumers import conf

    if not settings.configured:  # a script making ids outside Django
        return str(conf.default("RSC_MEMBER_ID_PREFIX"))
    return str(conf.settings().RSC_MEMBER_ID_PREFIX or "")
