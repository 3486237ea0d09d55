"""The REST API (Django REST framework): chats, messages, live events, tool-call
approvals, usage and the model registry, with an OpenAPI schema.

Mount it with ``path("api/", include("django_llmchat.api.urls"))``. It needs
``rest_framework``, ``django_filters`` and ``drf_spectacular`` in ``INSTALLED_APPS``
(``rest_framework.authtoken`` too for token authentication). The core never imports
this package.
"""
