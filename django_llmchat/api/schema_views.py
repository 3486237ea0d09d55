"""``schema/``, ``docs/`` and ``redoc/``: the API's OpenAPI schema, and Swagger UI and
Redoc to read it (their assets served by this site with ``drf_spectacular_sidecar``).

The one module of the package that uses drf-spectacular internals: the views' private
``_swagger_ui_resource``, ``_swagger_ui_favicon`` and ``_redoc_standalone``, overridden to
serve the assets from this site (``tests/test_django_internals.py`` names and checks each,
and that no other module names one)."""

from __future__ import annotations

from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from .schema_settings import SCHEMA_SETTINGS

__all__ = ["SchemaRedocView", "SchemaSwaggerView", "SchemaView"]


def _local_asset(path: str) -> str | None:
    """The static URL of a drf-spectacular-sidecar asset when that app is installed."""
    from django.apps import apps
    from django.templatetags.static import static

    if apps.is_installed("drf_spectacular_sidecar"):
        return static(f"drf_spectacular_sidecar/{path}")
    return None


class SchemaView(SpectacularAPIView):
    """``schema/``: the API's OpenAPI schema, generated with
    :data:`~django_llmchat.api.schema_settings.SCHEMA_SETTINGS`."""

    custom_settings = SCHEMA_SETTINGS
    schema = None  # not an endpoint of the schema itself


class SchemaSwaggerView(SpectacularSwaggerView):
    """Swagger UI for ``schema/``, its scripts served by this site when
    ``drf_spectacular_sidecar`` is installed (no CDN)."""

    url_name = "llmchat-api:schema"
    title = SCHEMA_SETTINGS["TITLE"]
    schema = None  # a page, not an endpoint of the schema

    @staticmethod
    def _swagger_ui_resource(filename):
        found = _local_asset(f"swagger-ui-dist/{filename}")
        return found or SpectacularSwaggerView._swagger_ui_resource(filename)

    @staticmethod
    def _swagger_ui_favicon():
        found = _local_asset("swagger-ui-dist/favicon-32x32.png")
        return found or SpectacularSwaggerView._swagger_ui_favicon()


class SchemaRedocView(SpectacularRedocView):
    """Redoc for ``schema/``, served by this site when ``drf_spectacular_sidecar`` is
    installed."""

    url_name = "llmchat-api:schema"
    title = SCHEMA_SETTINGS["TITLE"]
    schema = None

    @staticmethod
    def _redoc_standalone():
        found = _local_asset("redoc/bundles/redoc.standalone.js")
        return found or SpectacularRedocView._redoc_standalone()
