"""The client's address as the reverse proxy in front of the API server saw it: what the admin site's
login throttling (django-axes, ``AXES_CLIENT_IP_CALLABLE``) counts failures against.

Theory of operation
-------------------
Behind a proxy every request's ``REMOTE_ADDR`` is the proxy's own address, so a lockout keyed on it
holds one username for every client at once (a stranger's five wrong passwords lock the operator out
too). The proxy passes the address it saw in a header; trusting that header is only safe for the part
*our* proxies wrote, because a client can send the header itself with anything in it.

``RSC_TRUSTED_PROXY_HEADER`` names the header (``X-Forwarded-For``, ``X-Real-IP``; empty, the default:
none is trusted and the address is ``REMOTE_ADDR``, unchanged behaviour for direct connections), and
``RSC_TRUSTED_PROXY_COUNT`` how many proxies in a row append to it (each appends the address it received
the request from). The client is then the ``count``-th address from the right: whatever a client wrote
itself is further left and never read. A header with fewer addresses than that (the request did not come
through every proxy), or whose chosen entry is not an IP address, gives ``REMOTE_ADDR``. This is only
sound when the API server cannot be reached except through those proxies (docs/production.env).

A host project that installs the package uses it the same way:
``AXES_CLIENT_IP_CALLABLE = "coordinator.proxy.client_address"`` (docs/plugin.md).
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any

from coordinator import conf

_HEADER_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,99}")


def meta_key(header: str) -> str:
    """The ``request.META`` key of an HTTP header name: ``X-Forwarded-For`` -> ``HTTP_X_FORWARDED_FOR``
    (a name given as a META key already, ``HTTP_...``, is kept)."""
    name = header.strip().upper().replace("-", "_")
    return name if name.startswith("HTTP_") else f"HTTP_{name}"


def valid_header_name(header: str) -> bool:
    return bool(_HEADER_RE.fullmatch(header.strip()))


def client_address(request: Any) -> str | None:
    """The client's address: ``REMOTE_ADDR``, or with ``RSC_TRUSTED_PROXY_HEADER`` set the entry the
    nearest ``RSC_TRUSTED_PROXY_COUNT`` proxies wrote (see the module docstring)."""
    meta = request.META
    remote = meta.get("REMOTE_ADDR")
    current = conf.settings()
    header = str(current.RSC_TRUSTED_PROXY_HEADER or "").strip()
    if not header:
        return remote  # type: ignore[no-any-return]
    hops = [hop.strip() for hop in str(meta.get(meta_key(header), "")).split(",")]
    hops = [hop for hop in hops if hop]
    count = int(current.RSC_TRUSTED_PROXY_COUNT)
    if count < 1 or len(hops) < count:
        return remote  # type: ignore[no-any-return]
    return _address(hops[-count]) or remote


def _address(hop: str) -> str | None:
    """An IP address out of one header entry (``203.0.113.7``, ``[2001:db8::1]:443``, ``203.0.113.7:51234``),
    in canonical form; None for anything else (``unknown``, a host name, an obfuscated ``_hidden``)."""
    text = hop.strip().strip('"')
    if text.startswith("["):  # [v6] or [v6]:port
        text = text[1:].split("]", 1)[0]
    elif text.count(":") == 1:  # v4:port
        text = text.split(":", 1)[0]
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None
