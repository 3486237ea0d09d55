"""The Celery app of the test suite.

Workers started by the integration tests run ``python -m celery -A tests.celery_app
worker --pool threads`` with ``DJANGO_SETTINGS_MODULE=tests.worker_settings`` (the broker
and the rest come from the environment, see that module). The test process sends tasks
with :func:`make_app`, configured the same way.
"""

import os
from pathlib import Path

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.worker_settings")


def transport_options(visibility_timeout: int = 5) -> dict:
    return {
        "visibility_timeout": visibility_timeout,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
    }


def make_app(broker_url: str, queue: str, **conf) -> Celery:
    """A sending app for the test process (it does not read the Django settings)."""
    app = Celery("tests-sender", broker=broker_url, set_as_current=False)
    app.conf.update(
        task_default_queue=queue,
        broker_transport_options=transport_options(),
        **conf,
    )
    return app


app = Celery("tests")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _announce_ready(**kwargs):
    path = os.environ.get("LLMCHAT_TEST_READY_FILE")
    if path:
        Path(path).write_text(str(os.getpid()))
