"""The API's schema and documentation pages: drf-spectacular's views, narrowed to GET and HEAD.

Why subclasses: drf-spectacular's views answer every method DRF knows. OPTIONS on the Swagger view
renders DRF's metadata with the Swagger HTML template, which lacks the template's context and fails
with a 500. Like every other route under ``/api/``, these views answer only the methods they implement;
the rest are a 405 problem (coordinator/api/errors.py), with ``Allow: GET, HEAD``.

The pages' JavaScript, CSS and favicon come from drf-spectacular-sidecar, served as this site's own
static files (``SPECTACULAR_SETTINGS`` ``*_DIST = "SIDECAR"``): no CDN, so the pages work offline and no
third-party code runs on the coordinator's origin. Redoc's stock template also links Google Fonts;
:class:`RedocView` drops those links (Redoc falls back to the browser's fonts).
"""

from __future__ import annotations

from functools import cache
from typing import Any

from django.http import HttpResponse
from django.template import engines
from django.template.backends.django import Template
from drf_spectacular.settings import spectacular_settings
from drf_spectacular.utils import extend_schema
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.request import Request

READ_ONLY = ["get", "head"]


@cache
def _redoc_template() -> Template:
    """drf-spectacular's Redoc page with its <head> minus the Google Fonts links (compiled on first use,
    not at import: the template engines need the apps loaded)."""
    return engines["django"].from_string(
        """{% extends "drf_spectacular/redoc.html" %}{% block head %}
    <title>{{ title|default:"Redoc" }}</title>
    <meta charset="utf-8">
    <meta name="viewport" content="width=device-width, initial-scale=1">
    <style>body { margin: 0; padding: 0; }</style>
{% endblock head %}"""
    )


class SchemaView(SpectacularAPIView):
    http_method_names = READ_ONLY


class SwaggerView(SpectacularSwaggerView):
    http_method_names = READ_ONLY


class RedocView(SpectacularRedocView):
    http_method_names = READ_ONLY

    @extend_schema(exclude=True)
    def get(self, request: Request, *args: Any, **kwargs: Any) -> HttpResponse:
        context = {
            "title": self.title,
            "redoc_standalone": self._redoc_standalone(),
            "schema_url": self._get_schema_url(request),
            "settings": self._dump(spectacular_settings.REDOC_UI_SETTINGS),
        }
        return HttpResponse(_redoc_template().render(context, request))
