"""The Celery app of the test suite.

Workers started by the integration tests run ``python -m celery -A tests.celery_app
worker --pool threads`` with ``DJANGO_SETTINGS_MODULE=tests.worker_settings`` (the broker
and the rest come from the environment, see that module). The test process sends tasks
with :func:`make_app`, configured the same way.

Each task run ends with a line ``<state> <return value>`` appended to the file named after
its task id in ``LLMCHAT_TEST_TASKS_DIR``: a test waits there for a task to have ended (a
retried task writes ``RETRY`` first, then its final state).
"""

import os
from pathlib import Path

from celery import Celery
from celery.signals import task_postrun, worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.worker_settings")


def transport_options(visibility_timeout: int = 5) -> dict:
    return {
        "visibility_timeout": visibility_timeout,
        "unacked_restore_interval": 1,
        "unacked_restore_throttle": 1,
        "unacked_mutex_expire": 3,  # as tests/worker_settings.py
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

if os.environ.get("LLMCHAT_TEST_OTEL_SETUP"):  # a file of OpenTelemetry set-up, run at start
    import runpy

    runpy.run_path(os.environ["LLMCHAT_TEST_OTEL_SETUP"])


@worker_ready.connect
def _announce_ready(**kwargs):
    path = os.environ.get("LLMCHAT_TEST_READY_FILE")
    if path:
        Path(path).write_text(str(os.getpid()))


@task_postrun.connect
def _record_task_end(task_id=None, state=None, retval=None, **kwargs):
    folder = os.environ.get("LLMCHAT_TEST_TASKS_DIR")
    if folder and task_id:
        with open(Path(folder) / task_id, "a") as out:
            out.write(f"{state} {retval if state == 'SUCCESS' else type(retval).__name__}\n")
