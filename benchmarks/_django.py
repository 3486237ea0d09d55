"""Minimal Django setup shared by the benchmarks: a throwaway database, the app, migrations."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def setup(llmchat: dict | None = None, *, admin: bool = False, extra_apps=(), **overrides) -> None:
    """``admin=True``: with the Django admin (sessions, messages, templates, its URLs);
    ``extra_apps`` go before the app, ``overrides`` replace settings."""
    import dj_database_url
    import django
    from django.conf import settings

    url = os.environ.get("DATABASE_URL")
    if url:
        database = dj_database_url.parse(url)
        # beside the named database, so benchmarks on two databases never share one
        database["TEST"] = {"NAME": f"{database.get('NAME') or 'llmchat'}_bench"}
    else:
        path = Path(tempfile.mkdtemp()) / "bench.sqlite3"
        # WAL with synchronous=NORMAL: commits don't wait for fsync (the usual production
        # SQLite setting); both sides of every comparison use the same database.
        database = {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(path),
            "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"},
        }
    extra: dict = {}
    apps = ["django.contrib.auth", "django.contrib.contenttypes", "django_llmchat"]
    if admin:
        apps[:0] = ["django.contrib.admin", "django.contrib.sessions", "django.contrib.messages"]
        extra = {
            "ROOT_URLCONF": "_admin_urls",
            "STATIC_URL": "/static/",
            "MIDDLEWARE": [
                "django.contrib.sessions.middleware.SessionMiddleware",
                "django.contrib.auth.middleware.AuthenticationMiddleware",
                "django.contrib.messages.middleware.MessageMiddleware",
            ],
            "TEMPLATES": [
                {
                    "BACKEND": "django.template.backends.django.DjangoTemplates",
                    "APP_DIRS": True,
                    "OPTIONS": {
                        "context_processors": [
                            "django.template.context_processors.request",
                            "django.contrib.auth.context_processors.auth",
                            "django.contrib.messages.context_processors.messages",
                        ]
                    },
                }
            ],
        }
    apps[-1:-1] = list(extra_apps)
    extra = {"ALLOWED_HOSTS": ["testserver"], **extra, **overrides}
    settings.configure(
        DEBUG=False,
        SECRET_KEY="benchmarks",
        USE_TZ=True,
        INSTALLED_APPS=apps,
        **extra,
        DATABASES={"default": database},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        LLMCHAT=llmchat or {},
    )
    django.setup()
    from django.core.management import call_command

    if url:
        from django.db import connection

        connection.creation.create_test_db(verbosity=0, autoclobber=True, serialize=False)
    else:
        call_command("migrate", verbosity=0)
