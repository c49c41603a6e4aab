"""Local development against real services (PostgreSQL, Redis) with DEBUG on."""

from config.settings.base import *  # noqa: F403

DEBUG = env.bool("DJANGO_DEBUG", default=True)
# a terminal reads plain lines; production ships JSON ones (LOG_FORMAT)
LOGGING["handlers"]["console"]["formatter"] = env("LOG_FORMAT", default="plain")  # type: ignore[index]
SECRET_KEY = env("SECRET_KEY", default="local-only-insecure-key")
DATABASES = {
    "default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/tidegate")
}
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default="redis://127.0.0.1:6379/0")
