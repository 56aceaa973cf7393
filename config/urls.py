"""Root URLconf. The coordinator API and the operator pages will be mounted here."""

from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path

urlpatterns = [
    path("admin/", admin.site.urls),
]

# Serves the admin's CSS/JS under gunicorn too, but only when DEBUG is on (runserver does it anyway).
urlpatterns += staticfiles_urlpatterns()
