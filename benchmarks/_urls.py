"""URLs of the benchmarks that call the REST API."""

from django.urls import include, path

urlpatterns = [path("api/", include("django_llmchat.api.urls"))]
