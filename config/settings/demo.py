"""The embedded default: SQLite, tasks run in process, a simulated cluster. Never for production."""

from config.settings.base import *  # noqa: F403

# The demo looks like the product: its own 404 and 500 pages, never Django's debug
# pages listing every URL pattern (DJANGO_DEBUG=1 for those, when developing)
DEBUG = env.bool("DJANGO_DEBUG", default=False)
# a terminal reads plain lines; production ships JSON ones (LOG_FORMAT)
LOGGING["handlers"]["console"]["formatter"] = env("LOG_FORMAT", default="plain")  # type: ignore[index]
SECRET_KEY = env("SECRET_KEY", default="demo-only-insecure-key-do-not-use-in-production")
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=True)
TIDEGATE_EAGER_IN_BACKGROUND = frozenset({"billing.tasks.whatif_run"})
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="memory://")
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default=None)
EMAIL_BACKEND = "django.core.mail.backends.console.EmailBackend"
STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}

if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    # The demo's web requests and its queue tick (serve_demo) write from two threads:
    # take SQLite's write lock when a transaction begins (no deadlocked upgrade from a
    # read lock) and wait for it rather than fail with "database is locked".
    DATABASES["default"].setdefault("OPTIONS", {}).update(  # noqa: F405
        {"transaction_mode": "IMMEDIATE", "timeout": 30}
    )
