"""The worker side of ``worker_concurrency.py``: Django settings AND the Celery app.

Started as ``celery -A _celery_worker worker --pool threads --concurrency 50`` with
``DJANGO_SETTINGS_MODULE=_celery_worker``; the benchmark passes the database, the broker
and the ``LLMCHAT`` dict through the environment.
"""

import json
import os
from pathlib import Path

import dj_database_url
from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "_celery_worker")

# -- Django settings ---------------------------------------------------------------------
SECRET_KEY = "benchmarks"
DEBUG = False
USE_TZ = True
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "django_llmchat"]
DATABASES = {
    "default": {
        **dj_database_url.parse(os.environ.get("DATABASE_URL", "sqlite://:memory:")),
        "NAME": os.environ.get("BENCH_DB_NAME", "llmchat_bench"),
    }
}
if os.environ.get("BENCH_DB_POOL"):
    DATABASES["default"].setdefault("OPTIONS", {})["pool"] = json.loads(os.environ["BENCH_DB_POOL"])
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LLMCHAT = json.loads(os.environ.get("BENCH_LLMCHAT") or "{}")
CELERY_BROKER_URL = os.environ.get("BENCH_BROKER_URL")
CELERY_TASK_DEFAULT_QUEUE = os.environ.get("BENCH_QUEUE", "celery")
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# -- the Celery app ------------------------------------------------------------------------
app = Celery("bench")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _ready(**kwargs):
    path = os.environ.get("BENCH_READY_FILE")
    if path:
        Path(path).write_text(str(os.getpid()))
