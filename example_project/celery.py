"""The example project's Celery app: ``celery -A example_project worker --pool threads``.

Celery settings are the ``CELERY_*`` names in ``example_project/settings.py`` (e.g.
``CELERY_BROKER_URL``). Without a broker, ``Chat.ask_later`` runs its task in the web
process instead, so ``make run`` needs nothing else.
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
