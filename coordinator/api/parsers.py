"""Reading request bodies: JSON only, UTF-8 only, bounded in size, strict about what JSON allows.

Why not DRF's ``JSONParser``: it reads the whole body before any limit applies (``request.body``), lets
``NaN`` through only by setting, keeps the last of duplicate keys silently, and a deeply nested body
makes ``json`` raise ``RecursionError``, which it does not catch (a 500). Here the body is read up to the
limit plus one byte, and every malformed input is a 400.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import IO, Any

from django.utils.http import parse_header_parameters
from rest_framework import exceptions
from rest_framework.parsers import BaseParser
from rest_framework.request import Request

from coordinator import conf

from .errors import LengthRequired, PayloadTooLarge

JSON_MEDIA_TYPE = "application/json"
def max_body_bytes() -> int:
    return int(conf.settings().RSC_API_MAX_BODY_BYTES)


class StrictJSONParser(BaseParser):
    media_type = JSON_MEDIA_TYPE

    def parse(
        self,
        stream: IO[bytes],
        media_type: str | None = None,
        parser_context: Mapping[str, Any] | None = None,
    ) -> Any:
        limit = max_body_bytes()
        raw = stream.read(limit + 1)
        if len(raw) > limit:
            raise PayloadTooLarge(f"the request body exceeds {limit} bytes")
        try:
            return strict_loads(raw)
        except RecursionError as e:
            raise exceptions.ParseError("malformed JSON: nested too deeply") from e
        except ValueError as e:  # JSONDecodeError, UnicodeDecodeError, too many digits, our hooks
            raise exceptions.ParseError(f"malformed JSON: {e}") from e


def strict_loads(raw: bytes) -> Any:
    """UTF-8 JSON without duplicate keys or NaN/Infinity. Raises ValueError (or RecursionError)."""
    return json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates, parse_constant=_no_nan)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result


def _no_nan(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def require_json_body(request: Request) -> None:
    """415 unless the body is declared ``application/json`` (UTF-8); 411 for a chunked body without a
    length; 413 when it is declared too long.

    Called by the views that take a body, before ``request.data``: without a Content-Type DRF would
    parse any body as ``{}``, and a declared length over the limit is refused without reading it.
    """
    content_type = request.META.get("CONTENT_TYPE", "")
    media_type, params = parse_header_parameters(content_type)
    charset = params.get("charset", "utf-8").lower()
    if media_type != JSON_MEDIA_TYPE or charset not in ("utf-8", "utf8"):
        shown = content_type[:100] or "none"
        raise exceptions.UnsupportedMediaType(
            shown, detail=f"the body must be JSON sent as 'Content-Type: {JSON_MEDIA_TYPE}' (got {shown})"
        )
    if not request.META.get("CONTENT_LENGTH") and request.META.get("HTTP_TRANSFER_ENCODING"):
        raise LengthRequired()  # WSGI reads Content-Length bytes: a chunked body would look empty
    try:
        declared = int(request.META.get("CONTENT_LENGTH") or 0)
    except ValueError:
        declared = 0
    if declared > max_body_bytes():
        raise PayloadTooLarge(f"the request body exceeds {max_body_bytes()} bytes")
