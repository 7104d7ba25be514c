from __future__ import annotations

from django.contrib import admin
from django.urls import path

from endpoints.views import demo_target

urlpatterns = [
    path("admin/", admin.site.urls),
    path("demo/<slug:name>/", demo_target, name="demo-target"),
]
