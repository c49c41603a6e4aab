"""Settings shared by every environment; everything that varies comes from the environment."""

from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent.parent

env = environ.Env()

DEBUG = env.bool("DJANGO_DEBUG", default=False)
SECRET_KEY = env("SECRET_KEY", default="")
ALLOWED_HOSTS: list[str] = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])
CSRF_TRUSTED_ORIGINS: list[str] = env.list("DJANGO_CSRF_TRUSTED_ORIGINS", default=[])

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'demo.sqlite3'}")}
DATABASES["default"]["ATOMIC_REQUESTS"] = False
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "rest_framework",
    "knox",  # hashed, expiring API tokens (tenants.ApiToken)
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_htmx",  # request.htmx, and htmx itself as a static file (htmx-2.min.js)
    "tenants",
    "scheduler_bridge",
    "billing",
    "dashboard",
]

MIDDLEWARE = [
    "config.health.ProbeMiddleware",  # before host checks and the SSL redirect
    "config.logs.RequestIdMiddleware",  # every line logged for a request carries its id
    "config.metrics.RequestMetricsMiddleware",
    "config.security.SecurityHeadersMiddleware",  # CSP with a per-request nonce
    "tenants.api.middleware.InputGuardMiddleware",  # body size, NUL in parameters
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.locale.LocaleMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "tenants.idempotency.IdempotencyKeyMiddleware",  # a POST sent again answers as before
    "tenants.languages.PreferredLanguageMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "django.template.context_processors.i18n",
                "tenants.context_processors.navigation",
                "config.security.nonce_context",
            ],
        },
    },
]

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en"
LANGUAGES = [("en", "English"), ("zh-hans", "简体中文")]
LOCALE_PATHS = [BASE_DIR / "locale"]
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True
# Numbers grouped by three with a comma in both languages (config/formats); grouping is
# asked for where a value is shown (the money and gpu_hours filters), not switched on
# everywhere with USE_THOUSAND_SEPARATOR, which would also group ids and years in URLs.
FORMAT_MODULE_PATH = ["config.formats"]

STATIC_URL = "/static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    "config.static_finders.PlotlyFinder",
]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {"BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"},
}

LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "portal-landing"  # finance lands on the billing home
LOGOUT_REDIRECT_URL = "login"

EMAIL_BACKEND = env("EMAIL_BACKEND", default="django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_FILE_PATH = env("EMAIL_FILE_PATH", default=str(BASE_DIR / "sent-mail"))
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="tidegate@localhost")

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.tokens.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "tenants.api.pagination.ApiPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
        "rest_framework.filters.SearchFilter",
    ],
    "DEFAULT_PARSER_CLASSES": [
        # the API takes JSON, as its schema says (tenants.api.contract checks it)
        "tenants.api.parsers.BoundedJSONParser",
    ],
    "DEFAULT_SCHEMA_CLASS": "tenants.api.schema.ContractSchema",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
    "EXCEPTION_HANDLER": "tenants.api.errors.exception_handler",
}

# The largest request body accepted (1 MiB); larger is a 413 (tenants.api.middleware).
DATA_UPLOAD_MAX_MEMORY_SIZE = 1024 * 1024

SPECTACULAR_SETTINGS = {
    "TITLE": "Tidegate API",
    "DESCRIPTION": "Multi-tenant GPU quotas, fair-share admission and chargeback for Kubernetes.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # a statement's mode may also be "platform" (idle capacity), a tenant's setting not
    "ENUM_NAME_OVERRIDES": {
        "StatementModeEnum": "billing.models.periods.Statement.Mode",
        "BillingModeEnum": "billing.models.rates.TenantBillingSettings.Mode",
    },
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "tenants.api.schema.add_error_responses",
        "tenants.api.schema.document_idempotency_keys",
        "tenants.api.schema.drop_developer_descriptions",
        "tenants.api.schema.state_input_limits",
    ],
}

# Celery: JSON only, acknowledge after the task ran, bounded run time.
CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=env("REDIS_URL", default="memory://"))
CELERY_RESULT_BACKEND = env("CELERY_RESULT_BACKEND", default=env("REDIS_URL", default=None))
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=600)
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=540)
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)
# Tasks that, run eagerly (the demo), run on a thread of their own rather than inside the
# request that queued them: a what-if run takes many seconds, and production's answer is
# a 202 at once with the run queued.
TIDEGATE_EAGER_IN_BACKGROUND: frozenset[str] = frozenset()
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TIMEZONE = "UTC"
# A killed worker's unacknowledged task is delivered again after the visibility timeout:
# just over the longest a task may run, not kombu's default hour. Connecting to the broker
# or the result backend gives up in seconds, so an outage never holds a web worker
# (the outbox, tenants/outbox.py, sends what could not be sent).
CELERY_BROKER_TRANSPORT_OPTIONS = {
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=CELERY_TASK_TIME_LIMIT + 60),
    "socket_connect_timeout": 2,
    # look for such tasks every 10 s (kombu's default looks every tenth time: ~100 s)
    "unacked_restore_throttle": 1,
}
CELERY_BROKER_CONNECTION_TIMEOUT = 2
CELERY_REDIS_SOCKET_CONNECT_TIMEOUT = 2
CELERY_REDIS_SOCKET_TIMEOUT = 5
CELERY_TASK_DEFAULT_QUEUE = env("CELERY_TASK_DEFAULT_QUEUE", default="celery")
CELERY_BEAT_SCHEDULE: dict[str, dict[str, object]] = {
    "heartbeat": {"task": "tenants.tasks.heartbeat", "schedule": timedelta(minutes=10)},
    "outbox-relay": {"task": "tenants.tasks.outbox_relay", "schedule": timedelta(seconds=5)},
    "api-tokens-expire": {
        "task": "tenants.tasks.api_tokens_expire",
        "schedule": timedelta(hours=1),
    },
    "idempotency-keys-expire": {
        "task": "tenants.tasks.idempotency_keys_expire",
        "schedule": timedelta(hours=1),
    },
    "inventory-sync": {
        "task": "scheduler_bridge.tasks.inventory_sync_all",
        "schedule": timedelta(minutes=5),
    },
    "quota-sync": {
        "task": "scheduler_bridge.tasks.quota_sync_all",
        "schedule": timedelta(minutes=2),
    },
    # how soon new and ended queue work is seen (Job sync, then an admission cycle)
    "queue-tick": {
        "task": "scheduler_bridge.tasks.queue_tick_all",
        "schedule": timedelta(seconds=env.float("TIDEGATE_QUEUE_TICK_S", default=30.0)),
    },
    "billing-collect-usage": {
        "task": "billing.tasks.usage_collect_all",
        "schedule": timedelta(minutes=15),
    },
    "billing-evaluate-budgets": {
        "task": "billing.tasks.budgets_evaluate",
        "schedule": timedelta(minutes=15),
    },
    "billing-roll-periods": {"task": "billing.tasks.periods_roll", "schedule": timedelta(hours=1)},
    "billing-resume-closes": {
        "task": "billing.tasks.periods_resume_closes",
        "schedule": timedelta(minutes=1),
    },
    "billing-whatif-fail-stalled": {
        "task": "billing.tasks.whatif_runs_fail_stalled",
        "schedule": timedelta(minutes=5),
    },
    "mig-reconcile": {
        "task": "scheduler_bridge.tasks.mig_reconcile_all",
        "schedule": timedelta(minutes=5),
    },
}

# Observability (docs/operations.md): JSON log lines carrying request and task ids
# (LOG_FORMAT=plain for a terminal), /metrics behind a bearer token (off without one),
# a metrics port for Celery workers, probe timeouts, and the Retry-After of a 503.
LOG_FORMAT = env("LOG_FORMAT", default="json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"context": {"()": "config.logs.ContextFilter"}},
    "formatters": {
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "format": "%(levelname)s %(name)s %(message)s %(request_id)s %(task_id)s %(task_name)s",
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": "time",  # ISO 8601 in UTC
        },
        "plain": {
            "format": "%(asctime)s %(levelname)s %(name)s [%(request_id)s %(task_id)s] %(message)s"
        },
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": "plain" if LOG_FORMAT == "plain" else "json",
            "filters": ["context"],
        }
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}
CELERY_WORKER_HIJACK_ROOT_LOGGER = False
TIDEGATE_METRICS_TOKEN = env("TIDEGATE_METRICS_TOKEN", default="")
TIDEGATE_METRICS_PORT = env.int("TIDEGATE_METRICS_PORT", default=0)  # 0: no worker port
TIDEGATE_PROBE_TIMEOUT_S = env.float("TIDEGATE_PROBE_TIMEOUT_S", default=2.0)
TIDEGATE_RETRY_AFTER_S = env.int("TIDEGATE_RETRY_AFTER_S", default=10)
# How long the answer to a POST with an Idempotency-Key is kept (tenants/idempotency.py).
TIDEGATE_IDEMPOTENCY_KEY_HOURS = env.int("TIDEGATE_IDEMPOTENCY_KEY_HOURS", default=24)

TIDEGATE = {
    # Label on nodes naming their NVLink domain / clique (GPU Feature Discovery default).
    "TOPOLOGY_LABEL": env("TIDEGATE_TOPOLOGY_LABEL", default="nvidia.com/gpu.clique"),
    "MIG_CONFIG_NAMESPACE": env("TIDEGATE_MIG_CONFIG_NAMESPACE", default="gpu-operator"),
    # Seconds borrowed work runs before an owner may reclaim its GPUs (0: at once).
    "RECLAIM_MIN_RUN_S": env.float("TIDEGATE_RECLAIM_MIN_RUN_S", default=0.0),
    # Seconds work inside its guarantee waits for GPUs to free on their own before it
    # preempts other tenants' borrowed work (0: at once; docs/admission.md).
    "RECLAIM_WAIT_S": env.float("TIDEGATE_RECLAIM_WAIT_S", default=0.0),
    # Whether higher-priority work may preempt its own tenant's lower-priority work
    # (Kueue's withinClusterQueue: LowerPriority); off: priority orders the queue only.
    "PRIORITY_PREEMPTION": env.bool("TIDEGATE_PRIORITY_PREEMPTION", default=False),
    # Which GPU a share of a shared flavour takes: "fgd" (where the recent mix of share
    # sizes loses least to fragments) or "best-fit" (the fullest GPU that holds it).
    "SHARE_PACKING": env("TIDEGATE_SHARE_PACKING", default="fgd"),
    # Namespaces no tenant may bind besides Kubernetes' own: Tidegate's and the GPU
    # operator's (its usual names under Helm and on OpenShift).
    # Keep each cluster's pods, nodes and Tidegate's quotas in a per-process cache fed
    # by watches (list once, then watch) instead of listing them on every sync.
    "WATCH_CACHE": env.bool("TIDEGATE_WATCH_CACHE", default=True),
    "RESERVED_NAMESPACES": env.list(
        "TIDEGATE_RESERVED_NAMESPACES",
        default=["tidegate-system", "gpu-operator", "nvidia-gpu-operator"],
    ),
    # Outbox (tenants/outbox.py): a message sent but not started by a worker within this
    # many seconds is sent again (the broker lost it, e.g. a Redis restart).
    "OUTBOX_RESEND_AFTER_S": env.float("TIDEGATE_OUTBOX_RESEND_AFTER_S", default=120.0),
    # The shortest time between two runs of a task for the same arguments: submits and
    # cancels arriving meanwhile join the next cycle instead of queuing one each.
    "TASK_MIN_INTERVAL_S": {
        "scheduler_bridge.tasks.admission_cycle": env.float(
            "TIDEGATE_ADMISSION_CYCLE_INTERVAL_S", default=1.0
        ),
        # a sync asked for while another runs waits this long before it tries again
        "scheduler_bridge.tasks.jobs_sync": 0.5,
    },
}
if TIDEGATE["SHARE_PACKING"] not in ("fgd", "best-fit"):
    raise ImproperlyConfigured(
        f"TIDEGATE_SHARE_PACKING is {TIDEGATE['SHARE_PACKING']!r}; set it to fgd or best-fit."
    )
for _name in ("RECLAIM_MIN_RUN_S", "RECLAIM_WAIT_S"):
    if TIDEGATE[_name] < 0:
        raise ImproperlyConfigured(
            f"TIDEGATE_{_name} is {TIDEGATE[_name]:g}; give 0 (at once) or more seconds."
        )

# API access (docs/operations.md#security): hashed API tokens that expire after
# TIDEGATE_API_TOKEN_TTL days, rate limits per scope ("<count>/<s|min|hour|day>";
# empty: no limit), and the Permissions-Policy sent with every response.
KNOX_TOKEN_MODEL = "tenants.ApiToken"
MIGRATION_MODULES = {"knox": None}  # its own token table is swapped out: never created
TIDEGATE_API_TOKEN_TTL = env.int("TIDEGATE_API_TOKEN_TTL", default=30)
REST_KNOX = {"TOKEN_TTL": timedelta(days=TIDEGATE_API_TOKEN_TTL), "AUTH_HEADER_PREFIX": "Token"}
TIDEGATE_THROTTLE_RATES: dict[str, str | None] = {
    "user": env("TIDEGATE_THROTTLE_USER", default="1200/min") or None,
    "anon": env("TIDEGATE_THROTTLE_ANON", default="60/min") or None,
    "login": env("TIDEGATE_THROTTLE_LOGIN", default="10/min") or None,
    "token_create": env("TIDEGATE_THROTTLE_TOKEN_CREATE", default="20/hour") or None,
}
# Proxies in front of gunicorn that append to X-Forwarded-For (an ingress: 1); 0 counts
# per connecting address, which behind a proxy is the proxy's.
TIDEGATE_NUM_PROXIES = env.int("TIDEGATE_NUM_PROXIES", default=0)
REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"] = [
    "tenants.throttles.ApiUserThrottle",
    "tenants.throttles.ApiAnonThrottle",
]
TIDEGATE_CSP_REPORT_ONLY = env.bool("TIDEGATE_CSP_REPORT_ONLY", default=False)
SPECTACULAR_SETTINGS["SERVE_PERMISSIONS"] = ["rest_framework.permissions.IsAuthenticated"]
