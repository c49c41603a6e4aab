"""Tests: PostgreSQL and Redis at 127.0.0.1, fast password hashing, mail kept in memory."""

import hashlib

from config.settings.base import *  # noqa: F403

DEBUG = False
SECRET_KEY = "test-only-key"
DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/tidegate")
}
# Connections kept as production keeps them (its default, 60 s): a live server's request
# thread reuses its connection for every request of a kept-alive HTTP connection instead of
# opening one per request (a third of the API contract run's server time went to that).
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)  # noqa: F405
# One test database (per xdist worker) for each checkout: a suite run from a clean clone
# beside a working tree on the same PostgreSQL never shares, and clobbers, its tables.
_CHECKOUT = hashlib.sha256(str(BASE_DIR).encode()).hexdigest()[:8]  # noqa: F405
DATABASES["default"]["TEST"] = {"NAME": f"test_tidegate_{_CHECKOUT}"}
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.locmem.EmailBackend")
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/15")
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default="redis://127.0.0.1:6379/15")
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=True)
STORAGES["staticfiles"] = {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"}
LOGGING["root"]["level"] = "WARNING"  # type: ignore[index]
WHITENOISE_AUTOREFRESH = True  # serve from the app folders; tests never run collectstatic
WHITENOISE_USE_FINDERS = True
# Syncs list what they read, so a test sees a change the moment it makes it; the
# watched cache is tested on its own (tests/gateways/test_watch_cache.py) and through
# the syncs with it on (tests/bridge/test_watched_syncs.py).
TIDEGATE = {**TIDEGATE, "WATCH_CACHE": env.bool("TIDEGATE_WATCH_CACHE", default=False)}  # noqa: F405
# The suite signs in and calls the API far faster than a person: generous limits here;
# tests/tenants/test_throttling.py sets low rates and exceeds them on purpose.
TIDEGATE_THROTTLE_RATES = dict.fromkeys(TIDEGATE_THROTTLE_RATES, "100000/min")  # noqa: F405
