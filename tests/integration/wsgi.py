"""The WSGI application of the gunicorn web processes the integration tests start
(:class:`tests.integration.conftest.WebProcess`): the test app (``tests.worker_settings``,
``tests.urls``) with the tests' Celery app current, so a ``POST messages/`` answered 202
sends its task to the broker and queue named in the environment."""

from django.core.wsgi import get_wsgi_application

import tests.celery_app  # noqa: F401  the current Celery app (it sets DJANGO_SETTINGS_MODULE)

application = get_wsgi_application()
