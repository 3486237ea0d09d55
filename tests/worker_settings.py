"""Settings of the Celery worker processes the integration tests start.

The tests pass everything through the environment: the test database's name
(``LLMCHAT_TEST_DB_NAME``, the ``test_<name>`` database pytest-django created), the
``LLMCHAT`` dict as JSON (``LLMCHAT_TEST_SETTINGS``: providers pointed at the test's fake
server, ``EVENTS_URL``), the broker (``CELERY_BROKER_URL``) and the queue.
"""

import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

if os.environ.get("LLMCHAT_TEST_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["LLMCHAT_TEST_DB_NAME"]
if os.environ.get("LLMCHAT_TEST_DB_POOL"):
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = json.loads(
        os.environ["LLMCHAT_TEST_DB_POOL"]
    )

LLMCHAT = json.loads(os.environ.get("LLMCHAT_TEST_SETTINGS") or "{}")

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL")
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("LLMCHAT_TEST_QUEUE", "celery")
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # an unacknowledged task comes back this soon after its worker died
    "visibility_timeout": int(os.environ.get("LLMCHAT_TEST_VISIBILITY_TIMEOUT", "5")),
    "unacked_restore_interval": 1,
    "unacked_restore_throttle": 1,
    # the lock a worker takes to give back unacknowledged tasks: a worker the tests
    # SIGKILL while it holds it would otherwise keep every task from coming back for
    # kombu's default of five minutes
    "unacked_mutex_expire": 3,
}
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

if os.environ.get("LLMCHAT_TEST_SPANS"):  # the telemetry tests read this worker's spans
    from tests.otel import install_file_exporter

    install_file_exporter()
