"""WSGI entry point (gunicorn config.wsgi)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.production")
application = get_wsgi_application()

# Build the API's published schema now: each request is checked against it
# (tenants.api.contract), and a worker should not spend its first request building it.
from tenants.api.contract import warm_up  # noqa: E402

warm_up()
