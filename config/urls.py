"""Root URLconf: the coordinator API under /api/v1/ and the Django admin (operator pages) under /admin/.

Under /api/ every answer is JSON: unknown paths hit the catch-all below (a 404 problem, DEBUG or not),
and the handlers answer problem details for /api/ paths when something fails outside a view.
"""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import include, path

from coordinator.api import errors as api_errors

urlpatterns = [
    path("admin/", admin.site.urls),
    # The API under /api/v1/ and the catch-all for the rest of /api/ (the include a host project uses).
    path("", include("coordinator.urls")),
]

# Serves the admin's CSS/JS from the API server (make run) when DEBUG is on; production serves
# collected files.
urlpatterns += staticfiles_urlpatterns()

handler400 = api_errors.handler400
handler403 = api_errors.handler403
handler404 = api_errors.handler404
handler500 = api_errors.handler500
