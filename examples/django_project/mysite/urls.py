from django.contrib import admin
from django.contrib.staticfiles.urls import staticfiles_urlpatterns
from django.urls import path

from . import views

urlpatterns = [
    path("", views.home),
    path("api/status", views.status),  # the host's own, beside Ollama's /api/*
    path("admin/", admin.site.urls),  # API keys are listed (and revoked) here
    *staticfiles_urlpatterns(),  # the admin's CSS under uvicorn while DEBUG is on
]
