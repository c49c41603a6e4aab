"""Production: every secret and address comes from the environment; HTTPS enforced."""

from config.settings.base import *  # noqa: F403

DEBUG = False
SECRET_KEY = env("SECRET_KEY")  # required: no default outside the demo
DATABASES = {"default": env.db("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS")
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=env("REDIS_URL", default=""))

SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
SECURE_SSL_REDIRECT = env.bool("DJANGO_SECURE_SSL_REDIRECT", default=True)
SECURE_HSTS_SECONDS = env.int("DJANGO_SECURE_HSTS_SECONDS", default=31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = True
SECURE_HSTS_PRELOAD = True
SESSION_COOKIE_SECURE = True
CSRF_COOKIE_SECURE = True
SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# Cached reads of the ledger (billing.usage.ledger_cache) are shared by every web process when
# CACHE_URL names a Redis database (e.g. redis://redis:6379/2); without it each process
# keeps its own copy in memory.
if env("CACHE_URL", default=""):
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": env("CACHE_URL"),
        }
    }
