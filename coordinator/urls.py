"""The coordinator's URLs for a project's root URLconf: ``path("", include("coordinator.urls"))``.

* ``api/v1/``: the HTTP API (coordinator/api/urls.py), its OpenAPI schema and docs pages
  (``api/v1/schema/``, ``api/v1/docs/``, ``api/v1/redoc/``). Members call ``{RSC_COORDINATOR_URL}/api/v1/``:
  mounted under a prefix (``path("rsc/", include("coordinator.urls"))``), the members' URL carries it too
  (``RSC_COORDINATOR_URL=http://host/rsc``).
* ``api/...``: every other path under ``api/`` answers a 404 problem (RFC 9457), DEBUG or not, so API
  clients never get an HTML page.
* ``metrics``: Prometheus metrics (coordinator/metrics.py), for an admin credential or an
  ``RSC_METRICS_TOKENS`` token.

The operator pages are part of the Django admin (``admin_ui``): wherever the project mounts
``admin.site.urls``. See docs/plugin.md.

The one module of the coordinator outside coordinator/api/ that names the API: it is the wiring at the
top (a host project includes it), so tests/test_layering.py exempts it from the downward-only rule.
"""

from django.urls import include, path, re_path

from coordinator.api import errors as api_errors
from coordinator.metrics import metrics_view

urlpatterns = [
    path("api/v1/", include("coordinator.api.urls")),
    path("metrics", metrics_view, name="rsc-metrics"),
    re_path(r"^api(?:/[\s\S]*)?$", api_errors.api_not_found),
]
