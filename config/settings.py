"""Django settings, read from the environment (and an optional `.env` at the repository root).

Every variable is documented in `.env.example`. Values already in the environment win over `.env`.
"""

import os
import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import environ

from config.devstack_env import read_running as read_running_devstack
from config.errors import SettingsError
from config.extras import require
from consumers import conf as member_conf
from coordinator import conf as coordinator_conf
from coordinator.celery import beat_schedule
from coordinator.protocol.setting import Setting

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")  # a missing file is fine
# While `make run` runs: the settings it chose (its Redis, DEBUG, the DEV ONLY tokens), so that
# `manage.py ...` beside it needs no variable (config/devstack_env.py). The environment and .env win.
DEVSTACK_ENV_FILE = read_running_devstack(BASE_DIR)

# --- core ------------------------------------------------------------------------------------------

DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])

# Development mode (the development SECRET_KEY, no HTTPS redirect, HSTS or secure-only cookies): only when
# said so, by the variable DEVELOPMENT, which defaults to DEBUG. `make run` (config/devstack.py) sets
# both; the test suite sets DEVELOPMENT for its own process only (tests/settings.py), so the processes it
# starts (the API server and members of tests/e2e/stack.py) run as production does. Nothing is inferred
# from what happens to be imported: a production process that imports pytest stays in production mode.
DEVELOPMENT = env.bool("DEVELOPMENT", default=DEBUG)

# Development mode only, used when SECRET_KEY is unset. Outside it, the app refuses to start with this
# key, no key or a weak one: a key anyone can read on GitHub signs sessions, CSRF tokens and password
# reset links. The rule is Django's own (security.W009; tests/test_production_settings.py pins it).
DEV_SECRET_KEY = "django-insecure-dev-only-redis-stream-coordinator-do-not-deploy"
SECRET_KEY_MIN_LENGTH, SECRET_KEY_MIN_UNIQUE_CHARACTERS = 50, 5
SECRET_KEY_INSECURE_PREFIX = "django-insecure-"


def secret_key_problem(key: str) -> str | None:
    """Why ``key`` must not sign anything in production, or None if it may."""
    if not key:
        return "is not set"
    if key == DEV_SECRET_KEY or key.startswith(SECRET_KEY_INSECURE_PREFIX):
        return f"is the development key (or starts with {SECRET_KEY_INSECURE_PREFIX!r})"
    if len(key) < SECRET_KEY_MIN_LENGTH or len(set(key)) < SECRET_KEY_MIN_UNIQUE_CHARACTERS:
        return (
            f"is weak (fewer than {SECRET_KEY_MIN_LENGTH} characters or fewer than "
            f"{SECRET_KEY_MIN_UNIQUE_CHARACTERS} distinct ones)"
        )
    return None


# Read as they are, not through django-environ: it treats a value starting with "$" as a reference to
# another variable, and a random key (Django's get_random_secret_key) may well start with "$".
SECRET_KEY = os.environ.get("SECRET_KEY", "") or (DEV_SECRET_KEY if DEVELOPMENT else "")
# Old keys still accepted when checking signatures (not for signing), while SECRET_KEY is rotated.
SECRET_KEY_FALLBACKS = [k for k in os.environ.get("SECRET_KEY_FALLBACKS", "").split(",") if k]


def refuse_insecure_secret_keys(keys: dict[str, str]) -> None:
    """Raise SettingsError naming the first key (setting name -> value) that may not be used."""
    for name, key in keys.items():
        if (problem := secret_key_problem(key)) is not None:
            raise SettingsError(
                f"{name} {problem}, and DEBUG is off: refusing to start. Set {name} to a random value of "
                f"at least {SECRET_KEY_MIN_LENGTH} characters, e.g. the output of `python -c 'from "
                "django.core.management.utils import get_random_secret_key as k; print(k())'` "
                "(or DEBUG=true, for local development only; commands beside a running `make run` take "
                "its settings and need neither)."
            )


if not DEVELOPMENT:
    refuse_insecure_secret_keys(
        {"SECRET_KEY": SECRET_KEY}
        | {f"SECRET_KEY_FALLBACKS[{i}]": key for i, key in enumerate(SECRET_KEY_FALLBACKS)}
    )

# --- HTTPS, cookies and browser protections (docs/production.env) ----------------------------------
# Outside development mode the defaults are those of an HTTPS-only deployment: `manage.py check --deploy`
# then only asks for what a deployment must choose itself (hosts, proxy header, HSTS scope). In
# development mode they stay off so runserver and the test client work over plain HTTP.

# Plain-HTTP requests are redirected to HTTPS. Behind a TLS-terminating proxy, also set
# SECURE_PROXY_SSL_HEADER, or every request looks like HTTP and is redirected forever.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEVELOPMENT)
# Paths (regular expressions, no leading slash) served over HTTP too, e.g. a load balancer's probe.
SECURE_REDIRECT_EXEMPT = env.list("SECURE_REDIRECT_EXEMPT", default=[])
# "HTTP_X_FORWARDED_PROTO,https": trust this header, as set by YOUR proxy, to mean the request came in
# over HTTPS. Unset by default: trusting a header that no proxy strips lets any client claim HTTPS.
_proxy_ssl_header = env.list("SECURE_PROXY_SSL_HEADER", default=[])
if _proxy_ssl_header and len(_proxy_ssl_header) != 2:
    raise SettingsError(
        f"SECURE_PROXY_SSL_HEADER must be 'HEADER,value' (e.g. HTTP_X_FORWARDED_PROTO,https), "
        f"got {','.join(_proxy_ssl_header)!r}."
    )
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl_header) if _proxy_ssl_header else None
# Strict-Transport-Security on HTTPS responses: browsers then refuse plain HTTP to this host for that
# long. Subdomains and preload reach beyond this host (preload is hard to undo): opt in explicitly.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEVELOPMENT else 31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=False)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=False)
# Session and CSRF cookies only over HTTPS.
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEVELOPMENT)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEVELOPMENT)
# Origins ("https://coordinator.example.com") allowed to POST to the admin and operator pages when the
# browser's Origin differs from the Host Django sees (a proxy that rewrites Host, another port).
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])
SECURE_CONTENT_TYPE_NOSNIFF = env.bool("SECURE_CONTENT_TYPE_NOSNIFF", default=True)
SECURE_REFERRER_POLICY = env.str("SECURE_REFERRER_POLICY", default="same-origin")
X_FRAME_OPTIONS = env.str("X_FRAME_OPTIONS", default="DENY")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    # Swagger UI's and Redoc's JavaScript and CSS, served as our own static files (no CDN).
    "drf_spectacular_sidecar",
    # Admin-site login throttling: failed logins are counted per username and client address.
    "axes",
    "coordinator",
    "consumers",
    "admin_ui",
]
# The demo listener and producer that `make run` shows (config/devstack.py sets RSC_DEMO=true).
RSC_DEMO = env.bool("RSC_DEMO", default=False)
if RSC_DEMO:
    INSTALLED_APPS.append("consumers.demo")
# Your own apps, comma-separated dotted paths ("billing,shipping.apps.ShippingConfig"): their
# listeners.py is what `manage.py run_member` runs, here or under `make run`. They must be importable
# from the repository root (or installed in .venv).
RSC_EXTRA_APPS = [app for app in env.list("RSC_EXTRA_APPS", default=[]) if app not in INSTALLED_APPS]
INSTALLED_APPS += RSC_EXTRA_APPS

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its lockout response.
    "axes.middleware.AxesMiddleware",
]

# AxesStandaloneBackend first: it refuses a locked-out username + address before any password is checked.
# It needs the request: authenticate() without one (the test client's login(), a script) raises
# AxesBackendRequestParameterRequired; use force_login() in tests, or pass request=.
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
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

# SQLite (the embedded default of `make run`) or PostgreSQL (production: postgres://...; psycopg 3).
# Both are tested: `make test` runs the database tests on a private PostgreSQL too (tests/postgres.py).
DATABASES = {
    "default": {
        **env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}"),
        # Seconds a connection is kept open between requests (0: one per request). With PostgreSQL
        # behind the API server, 60 saves a connection set-up per request; health checks drop dead ones.
        "CONN_MAX_AGE": env.int("DATABASE_CONN_MAX_AGE", default=0),
        "CONN_HEALTH_CHECKS": True,
    },
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # psycopg: the [postgres] extra
    require("psycopg", "DATABASE_URL=postgres://...")
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

# Logging of this project (a host project that installs the apps keeps its own LOGGING; the apps' default
# when it has none: docs/plugin.md section 8). One console handler on the root logger at LOG_LEVEL, so the
# project's loggers, a listener app's (RSC_EXTRA_APPS) and the libraries' all reach it: nothing is swallowed.
# LOG_FORMAT=json writes one JSON object per line (python-json-logger), with the record's extra fields
# (member_id, consumer_group, shard, incident_id, ...) as keys.
# Django's request errors (5xx) reach the console whatever DEBUG and ADMINS say (Django's default sends
# them only to mail_admins when DEBUG is off, so without ADMINS a 500 left no trace); mail_admins
# still gets them where ADMINS is set.
# Celery's per-task lines of the tick ("received", "succeeded", beat's "sending due task": three lines per
# tick every second) are left out by the coordinator app (RSC_BEAT_TASK_LOGS, docs/plugin.md section 5):
# the tick logs what it changed, and nothing when it changed nothing.
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOG_FORMAT = env.str("LOG_FORMAT", default="plain")
if LOG_FORMAT not in ("plain", "json"):
    raise SettingsError(f"LOG_FORMAT must be 'plain' or 'json', got {LOG_FORMAT!r}.")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {
        "require_debug_false": {"()": "django.utils.log.RequireDebugFalse"},
        # member_id, consumer_group, stream_prefix, shard on a member's records (consumers/logcontext.py)
        "rsc_member": {"()": "consumers.logcontext.MemberContextFilter"},
    },
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(asctime)s %(levelname)s %(name)s %(message)s",
            "rename_fields": {"asctime": "time", "levelname": "level", "name": "logger"},
            "timestamp": False,
        },
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["rsc_member"]},
        "mail_admins": {
            "class": "django.utils.log.AdminEmailHandler",
            "level": "ERROR",
            "filters": ["require_debug_false"],
        },
    },
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # Not propagated: with DEBUG on, Django's own "django" console handler would print them twice.
        "django.request": {"handlers": ["console", "mail_admins"], "level": "ERROR", "propagate": False},
        # runserver's access log: a line per member heartbeat. Its 4xx (WARNING) and 5xx (ERROR) stay.
        "django.server": {"handlers": ["console"], "level": "WARNING", "propagate": False},
        **{
            name: {"level": "WARNING"}
            # axes.apps: a start-up banner in every process (API workers, Celery, each run_member).
            for name in ("axes.apps",)
        },
    },
}
# Celery keeps Django's LOGGING above instead of installing its own handlers on the root logger.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- the package's settings (coordinator/conf.py, consumers/conf.py) --------------------------------

# Each setting of the two tables from the environment variable of its name, with the table's type and
# default (what each means: the table's help, docs/plugin.md's table; .env.example). REDIS_URL unset
# means "not configured": `make run` (config/devstack.py) then starts a private embedded Redis and sets
# it for its children. RSC_RUNTIME is the one exception: the environment sets its max_concurrency alone.
_environment_readers = {
    str: env.str, int: env.int, float: env.float, bool: env.bool, list: env.list, dict: env.dict
}


def from_environment(setting: Setting) -> Any:
    """``setting``'s value from the environment variable of its name (comma-separated for a list,
    ``key=value,...`` for a dict), else its default. A setting whose default is None is unset when empty."""
    value = _environment_readers[setting.type](setting.name, default=setting.fresh_default())
    return None if setting.default is None and value == "" else value


_package_settings = {
    setting.name: from_environment(setting)
    for setting in (*coordinator_conf.SETTINGS, *member_conf.SETTINGS)
    if setting.name != "RSC_RUNTIME"
}
# The per-process runtime (consumers.Runtime): a dict of its fields, or the dotted path of a factory
# returning one; from the environment, its max_concurrency (worker threads inside ONE member).
_package_settings["RSC_RUNTIME"] = {
    "max_concurrency": env.int(
        "RSC_RUNTIME_MAX_CONCURRENCY", default=member_conf.default("RSC_RUNTIME")["max_concurrency"]
    )
}
globals().update(_package_settings)

if not re.fullmatch(
    r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", _package_settings["RSC_ADMIN_API_RATE"]
):
    raise SettingsError(
        f"RSC_ADMIN_API_RATE must be '<count>/<second|minute|hour|day>' (e.g. 600/min), "
        f"got {_package_settings['RSC_ADMIN_API_RATE']!r}."
    )

# --- Redis and Celery ------------------------------------------------------------------------------

# Celery's broker is never a cluster client (kombu would talk to the seed node alone): with a cluster
# REDIS_URL (redis+cluster://, docs/cluster.md) set CELERY_BROKER_URL to a plain Redis (check rsc.E007).
_redis_url = _package_settings["REDIS_URL"]
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or (
    None if _redis_url and _redis_url.split("://", 1)[0].lower().endswith("+cluster") else _redis_url
)
CELERY_TIMEZONE = TIME_ZONE
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# The tick (coordinator.service.run_tick) every RSC_TICK_INTERVAL_MS and the retention pass every
# RSC_RETENTION_INTERVAL_MS, each beat expiring at the next one (why, and the clock-sync caveat:
# coordinator/celery.py, the helper a host project's own Celery app uses too).
CELERY_BEAT_SCHEDULE = beat_schedule(
    tick_interval_ms=_package_settings["RSC_TICK_INTERVAL_MS"],
    retention_interval_ms=_package_settings["RSC_RETENTION_INTERVAL_MS"],
)

# --- REST framework --------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    # Every DRF error as RFC 9457 problem details (coordinator/api/errors.py), never a traceback.
    "EXCEPTION_HANDLER": "coordinator.api.errors.exception_handler",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "redis-stream-coordinator API",
    "DESCRIPTION": "Consumer-group coordinator for sharded Redis Streams (KIP-848 style). "
    "The protocol is docs/protocol.md; errors are RFC 9457 problem details (section 12).",
    "VERSION": "0.1.0",
    "SERVE_INCLUDE_SCHEMA": False,
    # The docs pages load Swagger UI and Redoc from drf-spectacular-sidecar's static files, not a CDN
    # (coordinator/api/docs.py). validatorUrl None: Swagger UI would otherwise send the schema's URL
    # to validator.swagger.io for its badge.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "SWAGGER_UI_SETTINGS": {"deepLinking": True, "validatorUrl": None},
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "MemberStateEnum": "coordinator.protocol.model.MemberState",
        "VersionStateEnum": "coordinator.protocol.model.VersionState",
        "GroupStateEnum": "coordinator.protocol.describe.GroupState",
        "EndReasonEnum": "coordinator.protocol.model.EndReason",
        "OrderingEnum": "coordinator.protocol.model.OrderingMode",
        "ProblemCodeEnum": "coordinator.api.schemas.ALL_CODES",
    },
}

# --- admin-site login throttling (django-axes) -----------------------------------------------------

# After this many failed logins for one username from one client address, that pair is locked out
# (HTTP 429, even with the right password) for AXES_COOLOFF_TIME. Other users and addresses are not.
AXES_FAILURE_LIMIT = env.int("RSC_LOGIN_FAILURE_LIMIT", default=5)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
# The address: REMOTE_ADDR, or behind a reverse proxy the one it passes in RSC_TRUSTED_PROXY_HEADER
# (with RSC_TRUSTED_PROXY_COUNT proxies in a row; coordinator/proxy.py). Without it every client has the
# proxy's address and a lockout holds the username for everyone.
AXES_CLIENT_IP_CALLABLE = "coordinator.proxy.client_address"
AXES_COOLOFF_TIME = timedelta(hours=1)
# A successful login forgets that pair's failures.
AXES_RESET_ON_SUCCESS = True
