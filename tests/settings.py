"""Settings for the test suite. ``DATABASE_URL`` points it at PostgreSQL."""

import os

import dj_database_url
from corsheaders.defaults import default_headers

SECRET_KEY = "tests-only-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

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
    "drf_spectacular_sidecar",
    "corsheaders",
    "django_llmchat",
]

MIDDLEWARE = [
    "corsheaders.middleware.CorsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

# a single-page app on another origin (docs/frontends.md)
CORS_ALLOWED_ORIGINS = ["http://spa.example"]
CORS_URLS_REGEX = r"^/api/.*$"
CORS_ALLOW_HEADERS = (*default_headers, "last-event-id")

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
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
        os.environ.get("DATABASE_URL") or "sqlite:///:memory:", conn_max_age=0
    )
}
# Behind PgBouncer in transaction mode (CI's pgbouncer cell, PGBOUNCER=1): each transaction
# may run on another server session, so no server-side cursors (docs/deployment.md).
if os.environ.get("PGBOUNCER"):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
# a second database, for the tests that route the package's models to it
# (tests/runs/test_routed.py, which turns DATABASE_ROUTERS on for themselves)
DATABASES["routed"] = {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}

STATIC_URL = "/static/"
MEDIA_ROOT = os.path.join(os.path.dirname(__file__), ".media")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

LLMCHAT = {}
