"""The HTTP server's own floor: a WSGI application that reads the body and answers ``{}``, nothing else.

bench/heartbeat_bench.py serves it with each candidate server (the ``-floor`` rows), so the table shows
what the server itself costs per request next to what a heartbeat costs through it.
"""

from collections.abc import Callable, Iterable
from typing import Any


def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
    environ["wsgi.input"].read(int(environ.get("CONTENT_LENGTH") or 0))
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", "2")])
    return [b"{}"]
