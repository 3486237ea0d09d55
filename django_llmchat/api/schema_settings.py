"""The settings of the API's OpenAPI schema (drf-spectacular), importable from a
project's settings module (this module imports nothing of Django)::

    from django_llmchat.api.schema_settings import SCHEMA_SETTINGS

    SPECTACULAR_SETTINGS = {**SCHEMA_SETTINGS}  # manage.py spectacular = /api/schema/
"""

from __future__ import annotations

from typing import Any

from .. import __version__

__all__ = ["SCHEMA_SETTINGS"]

SCHEMA_SETTINGS: dict[str, Any] = {
    "TITLE": "django-llmchat API",
    "DESCRIPTION": (
        "Chats, messages with tool calls and their results, live events (Server-Sent "
        "Events), tool-call approvals, usage and cost, and the model registry."
    ),
    "VERSION": __version__,
    "OAS_VERSION": "3.1.0",
    "COMPONENT_SPLIT_REQUEST": True,
    "PREPROCESSING_HOOKS": ["django_llmchat.api.schema.only_llmchat_endpoints"],
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "django_llmchat.api.schema.closed_request_bodies",
        "django_llmchat.api.schema.ui_chat_request_rules",
        "django_llmchat.api.schema.describe_path_parameters",
        "django_llmchat.api.event_schemas.describe_event_streams",
        "django_llmchat.api.schema.document_refusals",
        "django_llmchat.api.schema.nullable_31",
    ],
}
