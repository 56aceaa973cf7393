"""Root URLconf: the coordinator API under /api/v1/ and the Django admin (operator pages) under /admin/.

Under /api/ every answer is JSON: unknown paths hit the catch-all below (a 404 problem, DEBUG or not),
and the handlers answer problem details for /api/ paths when something fails outside a view.
"""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import include, path, re_path

from coordinator.api import errors as api_errors

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("coordinator.api.urls")),
    re_path(r"^api(?:/[\s\S]*)?$", api_errors.api_not_found),
]

# Serves the admin's CSS/JS under gunicorn too, but only when DEBUG is on (runserver does it anyway).
urlpatterns += staticfiles_urlpatterns()

handler400 = api_errors.handler400
handler403 = api_errors.handler403
handler404 = api_errors.handler404
handler500 = api_errors.handler500
