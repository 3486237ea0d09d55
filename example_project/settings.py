"""Settings of the example project.

SQLite and in-process tasks by default. Environment variables switch it up:
``DATABASE_URL`` (PostgreSQL), ``CELERY_BROKER_URL`` (Redis or RabbitMQ workers),
``LLMCHAT_EVENTS_URL`` (Redis fan-out of live events). ``DEBUG`` is off unless
``DJANGO_DEBUG=1`` (``make run`` sets it: ``runserver`` serves the static files only in
debug mode); ``DJANGO_ALLOWED_HOSTS`` (comma-separated) names the hosts it answers, by
default this machine only.

The model: ``LLMCHAT_PROVIDER`` / ``LLMCHAT_MODEL`` when set; else the first provider with
a key (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``), else a local Ollama
server if one answers; else the offline demo model (``demo`` / ``demo-model``), which
makes up its answers.
"""

import json
import os
import urllib.request
from pathlib import Path

import dj_database_url

from django_llmchat.api.schema_settings import SCHEMA_SETTINGS

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-insecure-key")
DEBUG = os.environ.get("DJANGO_DEBUG") == "1"
ALLOWED_HOSTS = [
    host.strip()
    for host in os.environ.get("DJANGO_ALLOWED_HOSTS", "127.0.0.1,localhost,[::1]").split(",")
    if host.strip()
]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI and Redoc at /api/docs/, /api/redoc/ (no CDN)
    "django_llmchat",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
WSGI_APPLICATION = "example_project.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "example_project" / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

DATABASES = {
    "default": dj_database_url.parse(
        os.environ.get("DATABASE_URL") or f"sqlite:///{BASE_DIR / 'db.sqlite3'}",
        conn_max_age=0,
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Web requests, streamed replies and in-process runs write at once: WAL lets readers
    # go on while one writes, IMMEDIATE transactions queue writers instead of failing
    # with "database is locked".
    DATABASES["default"]["OPTIONS"] = {
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
    }

AUTH_PASSWORD_VALIDATORS = []
LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
MEDIA_URL = "media/"
MEDIA_ROOT = BASE_DIR / "media"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATICFILES_DIRS = [BASE_DIR / "example_project" / "static"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "chat-page"
LOGOUT_REDIRECT_URL = "login"

# -- which model answers ------------------------------------------------------------------

# Providers the chat page offers, with the model a new chat starts on.
KEYED_PROVIDERS = {
    "openai": ("OPENAI_API_KEY", "gpt-4.1-mini"),
    "anthropic": ("ANTHROPIC_API_KEY", "claude-haiku-4-5"),
    "gemini": ("GEMINI_API_KEY", "gemini-2.5-flash"),
}
OLLAMA_URL = os.environ.get("OLLAMA_BASE_URL", "http://localhost:11434").removesuffix("/v1")


def _ollama_model() -> str | None:
    """The first model of a local Ollama server, or None when none answers quickly."""
    try:
        with urllib.request.urlopen(OLLAMA_URL.rstrip("/") + "/api/tags", timeout=0.3) as r:
            models = json.load(r).get("models") or []
    except (OSError, ValueError):
        return None
    names = [m.get("name") for m in models if isinstance(m, dict) and m.get("name")]
    return names[0] if names else None


EXAMPLE_PROVIDERS = {
    name: model for name, (env, model) in KEYED_PROVIDERS.items() if os.environ.get(env)
}
_asked = os.environ.get("LLMCHAT_PROVIDER", "")
if _asked == "ollama" or (not EXAMPLE_PROVIDERS and _asked in ("", "ollama")):
    _ollama = _ollama_model()  # a short probe: nothing listening fails at once
    if _ollama:
        EXAMPLE_PROVIDERS["ollama"] = _ollama
EXAMPLE_PROVIDERS["demo"] = "demo-model"  # always there, offline

_provider = _asked or next(iter(EXAMPLE_PROVIDERS))
_model = os.environ.get("LLMCHAT_MODEL") or EXAMPLE_PROVIDERS.get(_provider, "llama3.2")
EXAMPLE_PROVIDERS.setdefault(_provider, _model)
DEMO_MODE = _provider == "demo"

LLMCHAT = {
    "DEFAULT_PROVIDER": _provider,
    "DEFAULT_MODEL": _model,
    "EVENTS_URL": os.environ.get("LLMCHAT_EVENTS_URL") or None,
    "PROVIDERS": {"demo": {"class": "django_llmchat.testing.demo.DemoProvider"}},
    # the demo tools (weather, clock, booking with approval), importable by any worker
    "TOOL_MODULES": ["django_llmchat.testing.demo"],
    # what one user may spend (raise it per user in the admin: Spending limits)
    "LIMITS": {
        "default": {
            "usd_per_day": "2.00",
            "usd_per_month": "20.00",
            "runs_per_hour": 120,
            "concurrent_runs": 2,
            "soft": "0.8",
        }
    },
}
# and how fast: every API request, and the requests that start a run (EXAMPLE_RUNS_RATE: a
# DRF rate such as "100/min"; the browser tests start more runs a minute than a person)
REST_FRAMEWORK = {
    "DEFAULT_THROTTLE_RATES": {
        "llmchat": "600/min",
        "llmchat_runs": os.environ.get("EXAMPLE_RUNS_RATE") or "30/min",
    }
}
if "ollama" in EXAMPLE_PROVIDERS:
    LLMCHAT["PROVIDERS"]["ollama"] = {"base_url": OLLAMA_URL.rstrip("/") + "/v1"}

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or None

# manage.py spectacular writes the schema /api/schema/ serves
SPECTACULAR_SETTINGS = {**SCHEMA_SETTINGS}
