from __future__ import annotations

from django.contrib import admin
from django.urls import path

from api.main import api
from cronicorn_site import ops
from endpoints.views import demo_target

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api.urls),
    path("healthz", ops.healthz, name="healthz"),
    path("readyz", ops.readyz, name="readyz"),
    path("metrics", ops.metrics, name="metrics"),
    path("demo/<slug:name>/", demo_target, name="demo-target"),
]
