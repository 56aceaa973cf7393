"""Django settings, read from the environment (and an optional `.env` at the repository root).

Every variable is documented in `.env.example`. Values already in the environment win over `.env`.
"""

import os
import re
import sys
from datetime import timedelta
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

from coordinator.celery import beat_schedule

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")  # a missing file is fine

# --- core ------------------------------------------------------------------------------------------

DEBUG = env.bool("DEBUG", default=False)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])

# Development mode: DEBUG on (`make run`, config/devstack.py, turns it on unless set) or the test suite.
# pytest-django imports these settings before any conftest runs and with DEBUG off (it forces DEBUG off
# for the tests anyway), so an in-process test run is recognised by pytest being imported. Processes the
# suite starts (the API server and members in tests/e2e/stack.py) are not: they run as production does.
DEVELOPMENT = DEBUG or "pytest" in sys.modules

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
    """Raise ImproperlyConfigured naming the first key (setting name -> value) that may not be used."""
    for name, key in keys.items():
        if (problem := secret_key_problem(key)) is not None:
            raise ImproperlyConfigured(
                f"{name} {problem}, and DEBUG is off: refusing to start. Set {name} to a random value of "
                f"at least {SECRET_KEY_MIN_LENGTH} characters, e.g. the output of `python -c 'from "
                "django.core.management.utils import get_random_secret_key as k; print(k())'` "
                "(or DEBUG=true, for local development only)."
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
    raise ImproperlyConfigured(
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

# Logging of this project (a host project that installs the apps keeps its own LOGGING: the apps
# configure nothing). One console handler on the root logger at LOG_LEVEL, so the project's loggers, a
# listener app's (RSC_EXTRA_APPS) and the libraries' all reach it: nothing is swallowed.
# LOG_FORMAT=json writes one JSON object per line (python-json-logger), with the record's extra fields
# (member_id, consumer_group, shard, incident_id, ...) as keys.
# Django's request errors (5xx) reach the console whatever DEBUG and ADMINS say (Django's default sends
# them only to mail_admins when DEBUG is off, so without ADMINS a 500 left no trace); mail_admins
# still gets them where ADMINS is set.
# Celery's per-task lines ("received", "succeeded", beat's "sending due task": three lines per tick
# every second) are kept at WARNING: the tick logs what it changed, and nothing when it changed nothing.
LOG_LEVEL = env.str("LOG_LEVEL", default="INFO")
LOG_FORMAT = env.str("LOG_FORMAT", default="plain")
if LOG_FORMAT not in ("plain", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be 'plain' or 'json', got {LOG_FORMAT!r}.")
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
            for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat", "axes.apps")
        },
    },
}
# Celery keeps Django's LOGGING above instead of installing its own handlers on the root logger.
CELERY_WORKER_HIJACK_ROOT_LOGGER = False

# --- Redis and Celery ------------------------------------------------------------------------------

# The stream data plane and the coordinator's metadata store. Unset means "not configured":
# `make run` (config/devstack.py) then starts a private embedded Redis and sets it for its children.
REDIS_URL = env.str("REDIS_URL", default="") or None

# Celery's broker is never a cluster client (kombu would talk to the seed node alone): with a cluster
# REDIS_URL (redis+cluster://, docs/cluster.md) set CELERY_BROKER_URL to a plain Redis (check rsc.E007).
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default="") or (
    None if REDIS_URL and REDIS_URL.split("://", 1)[0].lower().endswith("+cluster") else REDIS_URL
)
CELERY_TIMEZONE = TIME_ZONE
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

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

# --- coordinator API (coordinator/api/auth.py) -----------------------------------------------------

# Bearer tokens, comma-separated. Members may heartbeat and read routing; admins may do everything.
# More credentials (stored hashed): `manage.py create_api_credential NAME --role member|admin`.
RSC_MEMBER_TOKENS = env.list("RSC_MEMBER_TOKENS", default=[])
RSC_ADMIN_TOKENS = env.list("RSC_ADMIN_TOKENS", default=[])
# Larger request bodies are refused with 413 before they are read.
RSC_API_MAX_BODY_BYTES = env.int("RSC_API_MAX_BODY_BYTES", default=64 * 1024)
# Scrape-only bearer tokens for /metrics (coordinator/metrics.py); admin credentials work too.
RSC_METRICS_TOKENS = env.list("RSC_METRICS_TOKENS", default=[])
# Database credentials are cached per process for at most this long; a change committed anywhere
# applies at once regardless (a shared generation in Redis), this is the fall-back while Redis is down.
RSC_CREDENTIAL_CACHE_S = env.float("RSC_CREDENTIAL_CACHE_S", default=5.0)
# Per live member: RSC_HEARTBEAT_BURST heartbeats back to back, then one per RSC_HEARTBEAT_FLOOR_MS
# (429 HEARTBEAT_TOO_FREQUENT beyond; 0 turns the floor off). The fastest legal heartbeat interval is
# 100 ms (10/s), so the default leaves a member twice that rate plus bursts.
RSC_HEARTBEAT_FLOOR_MS = env.int("RSC_HEARTBEAT_FLOOR_MS", default=50)
RSC_HEARTBEAT_BURST = env.int("RSC_HEARTBEAT_BURST", default=20)
# Steady heartbeats answered at the WSGI layer, before Django's middleware (coordinator/api/door.py;
# config/wsgi.py wraps the application). It turns itself off when MIDDLEWARE holds a class it does not
# know; false: every heartbeat goes through Django (the answers are the same).
RSC_HEARTBEAT_DOOR = env.bool("RSC_HEARTBEAT_DOOR", default=True)
# Joins running at once per API process; one more gets 429 JOINS_THROTTLED (shed first under load so
# steady heartbeats keep every lease). 0: no limit.
RSC_MAX_CONCURRENT_JOINS = env.int("RSC_MAX_CONCURRENT_JOINS", default=4)
# Admin API requests per credential (token or staff user), "<count>/<second|minute|hour|day>"; more are
# refused with 429 and Retry-After. Counted in the default cache: per process with the default
# LocMemCache (coordinator/api/throttling.py).
RSC_ADMIN_API_RATE = env.str("RSC_ADMIN_API_RATE", default="600/min")
if not re.fullmatch(r"[1-9][0-9]*/(s|sec|second|m|min|minute|h|hour|d|day)", RSC_ADMIN_API_RATE):
    raise ImproperlyConfigured(
        f"RSC_ADMIN_API_RATE must be '<count>/<second|minute|hour|day>' (e.g. 600/min), "
        f"got {RSC_ADMIN_API_RATE!r}."
    )

# --- admin-site login throttling (django-axes) -----------------------------------------------------

# After this many failed logins for one username from one client address, that pair is locked out
# (HTTP 429, even with the right password) for AXES_COOLOFF_TIME. Other users and addresses are not.
AXES_FAILURE_LIMIT = env.int("RSC_LOGIN_FAILURE_LIMIT", default=5)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_COOLOFF_TIME = timedelta(hours=1)
# A successful login forgets that pair's failures.
AXES_RESET_ON_SUCCESS = True

# --- coordinator (checked at start-up by coordinator/checks.py) -----------------------------------

# How often the Celery beat tick expires members whose lease has run out.
RSC_TICK_INTERVAL_MS = env.int("RSC_TICK_INTERVAL_MS", default=1000)
# A member whose last heartbeat is older than this is marked EXPIRED and loses its shards.
RSC_MEMBER_LEASE_TTL_MS = env.int("RSC_MEMBER_LEASE_TTL_MS", default=10000)
# The heartbeat interval the coordinator hands to members.
RSC_HEARTBEAT_INTERVAL_MS = env.int("RSC_HEARTBEAT_INTERVAL_MS", default=3000)
# A member that has not released its revoked shards within this time is expired, so they can move on.
RSC_REVOCATION_TIMEOUT_MS = env.int("RSC_REVOCATION_TIMEOUT_MS", default=30000)
# How long EXPIRED / LEFT members stay visible to operators before the tick forgets them.
RSC_MEMBER_RETENTION_MS = env.int("RSC_MEMBER_RETENTION_MS", default=600000)
# At most this many ended members are kept per group (the most recently ended), whatever their age.
RSC_MAX_ENDED_MEMBERS = env.int("RSC_MAX_ENDED_MEMBERS", default=100)
# How often the retention pass (coordinator.service.run_retention) trims streams and deletes retired
# versions' streams; at least 1000. It is its own beat task: it never delays the tick's lease expiry.
RSC_RETENTION_INTERVAL_MS = env.int("RSC_RETENTION_INTERVAL_MS", default=30000)
# At most this many streams are visited per retention pass; the next pass continues where it stopped.
RSC_RETENTION_MAX_STREAMS = env.int("RSC_RETENTION_MAX_STREAMS", default=2000)
# Audit rows older than this many days are deleted by the retention pass and `manage.py prune_audit`.
RSC_AUDIT_RETENTION_DAYS = env.int("RSC_AUDIT_RETENTION_DAYS", default=365)
# The secret the data plane's dead_letter function signs its copies with (docs/protocol.md section 14);
# empty: derived from SECRET_KEY (whose SECRET_KEY_FALLBACKS still verify older dead letters).
RSC_DEAD_LETTER_SECRET = env.str("RSC_DEAD_LETTER_SECRET", default="")

# The tick (coordinator.service.run_tick) every RSC_TICK_INTERVAL_MS and the retention pass every
# RSC_RETENTION_INTERVAL_MS, each beat expiring at the next one (why, and the clock-sync caveat:
# coordinator/celery.py, the helper a host project's own Celery app uses too).
CELERY_BEAT_SCHEDULE = beat_schedule(
    tick_interval_ms=RSC_TICK_INTERVAL_MS, retention_interval_ms=RSC_RETENTION_INTERVAL_MS
)

# --- consumers: members run by `manage.py run_member` (consumers/management/commands/run_member.py) ---

# The coordinator's HTTP API, or "inprocess" to call the metadata store (REDIS_URL) directly.
RSC_COORDINATOR_URL = env.str("RSC_COORDINATOR_URL", default="http://127.0.0.1:8000")
# The bearer token members present (one of the coordinator's RSC_MEMBER_TOKENS, or a credential).
RSC_MEMBER_TOKEN = env.str("RSC_MEMBER_TOKEN", default="")
# Starts every member id this process makes: set it to the member-id prefix of RSC_MEMBER_TOKEN's
# credential when that credential is scoped to one (manage.py create_api_credential --member-id-prefix).
RSC_MEMBER_ID_PREFIX = env.str("RSC_MEMBER_ID_PREFIX", default="")
# run_member serves its Prometheus metrics on this port (0: not served). docs/metrics.md
RSC_MEMBER_METRICS_PORT = env.int("RSC_MEMBER_METRICS_PORT", default=0)
# The per-process runtime (consumers.Runtime): a dict of its fields, or the dotted path of a factory
# returning one. max_concurrency = worker threads inside ONE member, reported as its capacity.
RSC_RUNTIME = {"max_concurrency": env.int("RSC_RUNTIME_MAX_CONCURRENCY", default=1)}
# Member fan-out per listener name, overriding @listener(concurrency=...): "billing=5,shipping=2"
# (values are validated by run_member: integers or numeric strings in 1..1024).
RSC_LISTENER_CONCURRENCY = env.dict("RSC_LISTENER_CONCURRENCY", default={})
# How long a stopping member may take to finish in-flight work before it leaves anyway (seconds).
RSC_SHUTDOWN_TIMEOUT_S = env.float("RSC_SHUTDOWN_TIMEOUT_S", default=30.0)
