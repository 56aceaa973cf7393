"""Django settings, read from the environment (and an optional `.env` at the repository root).

Every variable is documented in `.env.example`. Values already in the environment win over `.env`.
"""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")  # a missing file is fine

# --- core ------------------------------------------------------------------------------------------

# The default is for development only. Its "django-insecure-" prefix makes
# `manage.py check --deploy` report it (security.W009): set SECRET_KEY in any real deployment.
SECRET_KEY = env.str(
    "SECRET_KEY",
    default="django-insecure-dev-only-redis-stream-coordinator-do-not-deploy",
)
DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "coordinator",
    "consumers",
    "admin_ui",
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

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
            ],
        },
    },
]

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

# The project's own loggers; Django's keep their default configuration.
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        name: {"handlers": ["console"], "level": LOG_LEVEL, "propagate": False}
        for name in ("coordinator", "consumers", "admin_ui", "config")
    },
}

# --- Redis and Celery ------------------------------------------------------------------------------

# The stream data plane and the coordinator's metadata store. Unset means "not configured":
# `make run` (config/devstack.py) then starts a private embedded Redis and sets it for its children.
REDIS_URL = env.str("REDIS_URL", default="") or None

CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or REDIS_URL
CELERY_TIMEZONE = TIME_ZONE
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# --- REST framework --------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "redis-stream-coordinator API",
    "DESCRIPTION": "Consumer-group coordinator for sharded Redis Streams (KIP-848 style).",
    "VERSION": "0.1.0",
}

# --- coordinator (checked at start-up by coordinator/checks.py) -----------------------------------

# How often the Celery beat tick expires members whose lease has run out.
RSC_TICK_INTERVAL_MS = env.int("RSC_TICK_INTERVAL_MS", default=1000)
# A member whose last heartbeat is older than this is marked EXPIRED and loses its shards.
RSC_MEMBER_LEASE_TTL_MS = env.int("RSC_MEMBER_LEASE_TTL_MS", default=10000)
# The heartbeat interval the coordinator hands to members.
RSC_HEARTBEAT_INTERVAL_MS = env.int("RSC_HEARTBEAT_INTERVAL_MS", default=3000)
# A member that has not released its revoked shards within this time is expired, so they can move on.
RSC_REVOCATION_TIMEOUT_MS = env.int("RSC_REVOCATION_TIMEOUT_MS", default=30000)
