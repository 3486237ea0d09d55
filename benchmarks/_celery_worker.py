"""The worker side of ``worker_concurrency.py``: Django settings AND the Celery app.

Started as ``celery -A _celery_worker worker --pool threads --concurrency 50`` with
``DJANGO_SETTINGS_MODULE=_celery_worker``; the benchmark passes the database, the broker
and the ``LLMCHAT`` dict through the environment.
"""

import json
import os
import threading
import time
from collections import Counter
from pathlib import Path

import dj_database_url
from celery import Celery
from celery.signals import task_postrun, task_prerun, task_retry, worker_ready, worker_shutdown

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
CELERY_WORKER_PREFETCH_MULTIPLIER = int(os.environ.get("BENCH_PREFETCH", "1"))
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


# -- what the worker did (``BENCH_STATS_FILE``: written as JSON when the worker stops) ----
_stats: Counter = Counter()
_started: dict[str, float] = {}
_mutex = threading.Lock()


@task_prerun.connect
def _task_started(task_id=None, **kwargs):
    _started[task_id] = time.perf_counter()


@task_postrun.connect
def _task_ended(task_id=None, state=None, retval=None, **kwargs):
    took = time.perf_counter() - _started.pop(task_id, time.perf_counter())
    outcome = retval if state == "SUCCESS" else str(state).lower()
    with _mutex:
        _stats[f"tasks {outcome}"] += 1
        _stats[f"seconds {outcome}"] += took


@task_retry.connect
def _task_retried(request=None, reason=None, **kwargs):
    when = getattr(reason, "when", None)
    if hasattr(when, "timestamp"):
        when = when.timestamp() - time.time()
    with _mutex:
        _stats["retries"] += 1
        _stats["retry countdown seconds"] += float(when or 0.0)


@worker_shutdown.connect
def _write_stats(**kwargs):
    path = os.environ.get("BENCH_STATS_FILE")
    if not path:
        return
    from django.db import connections

    pool = getattr(connections["default"], "pool", None)
    stats = dict(_stats)
    if pool is not None:
        stats.update({f"pool {k}": v for k, v in pool.get_stats().items()})
    Path(path).write_text(json.dumps(stats))
