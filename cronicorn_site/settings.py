"""Settings, read once from the environment.

Every value comes through one of the ``env_*`` helpers below, which raise
``ImproperlyConfigured`` with the variable's name and what is allowed when a value is
malformed, so a typo stops the process at start instead of misbehaving later.
"""

from __future__ import annotations

import math
import os
import re
import secrets
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured
from dotenv import dotenv_values

from endpoints.cpus import cpu_list

BASE_DIR = Path(__file__).resolve().parent.parent


def env_str(name: str, default: str) -> str:
    # Empty means unset, as for the other helpers (a bare `NAME=` line in an .env file).
    return os.environ.get(name) or default


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    value = raw.strip().lower()
    if value in {"1", "true", "yes", "on"}:
        return True
    if value in {"0", "false", "no", "off"}:
        return False
    raise ImproperlyConfigured(f"{name}={raw!r} is not a boolean; use true or false.")


def env_int(
    name: str, default: int, *, minimum: int | None = None, maximum: int | None = None
) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a whole number.") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is too small; it must be at least {minimum}.")
    if maximum is not None and value > maximum:
        raise ImproperlyConfigured(f"{name}={value} is too large; it must be at most {maximum}.")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name}={raw!r} is not a number.") from None
    if not math.isfinite(value):
        raise ImproperlyConfigured(f"{name}={raw!r} is not a finite number.")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name}={value} is too small; it must be at least {minimum}.")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_choice(name: str, default: str, choices: tuple[str, ...]) -> str:
    value = env_str(name, default)
    if value not in choices:
        raise ImproperlyConfigured(f"{name}={value!r} is not one of: {', '.join(choices)}.")
    return value


def read_local_setup() -> Path | None:
    """Put the local set-up's variables (``.env.local``, written once by scripts/start)
    under the environment, so every process started in the checkout (a second terminal,
    an MCP client launching manage.py) runs as the quick start does, with nothing
    exported by hand. A variable set in the environment wins. Without the file nothing
    changes: a process started without configuration is a production process.
    ``CRONICORN_ENV_FILE`` names another file; set empty, none is read."""
    raw = os.environ.get("CRONICORN_ENV_FILE")
    if raw == "":
        return None
    path = Path(raw) if raw else BASE_DIR / ".env.local"
    if not path.is_file():
        if raw:
            raise ImproperlyConfigured(f"CRONICORN_ENV_FILE={raw!r} is not a file.")
        return None
    for name, value in dotenv_values(path).items():
        if value is not None:
            os.environ.setdefault(name, value)
    return path


LOCAL_SETUP = read_local_setup()

# Off unless set: a process started without configuration is a production process
# (tracebacks hidden, secure cookies, a secret key required). The local set-up
# (scripts/start's .env.local) and scripts/test turn it on, explicitly.
DEBUG = env_bool("DEBUG", False)


def _secret_key() -> str:
    key = os.environ.get("DJANGO_SECRET_KEY", "")
    if key:
        return key
    if not DEBUG:
        raise ImproperlyConfigured(
            "DJANGO_SECRET_KEY is not set and DEBUG is false. In production set it to a long "
            "random string (python -c 'import secrets; print(secrets.token_urlsafe(50))'); "
            "on your own machine run scripts/start once, which writes the local set-up "
            "(.env.local) that every command in the checkout reads."
        )
    # Local default: generate once and keep it in a git-ignored file, so sessions survive
    # restarts without any secret living in the code.
    path = BASE_DIR / ".secret_key"
    if not path.exists():
        path.write_text(secrets.token_urlsafe(50))
        path.chmod(0o600)
    return path.read_text().strip()


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("DJANGO_ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("DJANGO_CSRF_TRUSTED_ORIGINS", [])
SESSION_COOKIE_SECURE = env_bool("DJANGO_SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ninja",
    "endpoints",
    "planner",
    "api",
    "notifications",
    "console",
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

ROOT_URLCONF = "cronicorn_site.urls"
WSGI_APPLICATION = "cronicorn_site.wsgi.application"

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
            ],
        },
    },
]

# --- Database -------------------------------------------------------------------------
DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}")
try:
    # A connection kept between requests is checked (one SELECT 1) before a request reuses
    # it: after a database restart the next request reconnects instead of failing.
    _database = dj_database_url.parse(DATABASE_URL, conn_max_age=60, conn_health_checks=True)
except (ValueError, KeyError) as exc:
    # The URL may carry a password: show it masked, and not the parser's echo of it.
    _shown = re.sub(r"(://[^:/@]*:)[^@]*@", r"\1••••@", DATABASE_URL)
    _reason = str(exc).replace(DATABASE_URL, _shown)
    raise ImproperlyConfigured(
        f"DATABASE_URL={_shown!r} is not understood ({_reason}); use e.g. "
        "postgres://user@127.0.0.1:5432/name or sqlite:///path/to/file.sqlite3."
    ) from None
if _database["ENGINE"] == "django.db.backends.sqlite3":
    # One writer at a time: WAL lets readers run beside it, IMMEDIATE takes the write lock
    # at BEGIN (so the claim cannot deadlock on a lock upgrade), and the busy timeout
    # makes a second writer wait instead of failing. Connections are kept (per thread) like
    # PostgreSQL's: reconnecting per run cost the embedded scheduler half its throughput.
    _database["OPTIONS"] = {
        "transaction_mode": "IMMEDIATE",
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
    }
DATABASES = {"default": _database}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "var" / "static"
# Once `collectstatic` has filled STATIC_ROOT (the Docker image does it at build time),
# WhiteNoise serves those files from gunicorn; before that, runserver serves them in DEBUG.
if STATIC_ROOT.is_dir():
    MIDDLEWARE.insert(1, "whitenoise.middleware.WhiteNoiseMiddleware")

# --- Celery ---------------------------------------------------------------------------
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "redis://localhost:6379/0")
# No result backend: the Run row is the record of an execution and each loop's Heartbeat
# row of its last pass (docs/DESIGN.md, "Processes"); results are ignored.
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = env_int("CELERY_WORKER_PREFETCH_MULTIPLIER", 4, minimum=1)
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TIMEZONE = "UTC"
CELERY_ENABLE_UTC = True
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# ETAs stay inside the claim horizon (seconds), far below this visibility timeout.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": 3600}
# Workers reconnect after a broker outage of any length instead of giving up.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
if CELERY_BROKER_URL.startswith("redis://"):
    # kombu's Redis transport with a worker that survives a Redis restart (see broker.py).
    CELERY_BROKER_TRANSPORT = "cronicorn_site.broker:Transport"

# --- Cronicorn ------------------------------------------------------------------------
# How often celery beat sends the tick, and how far ahead (ms) a tick claims. A claim
# waits for its slot (the dispatcher sends each request at its time), so the horizon may
# pass the tick, and by default does: every slot is claimed at least a tick before its
# time, not by the tick that happens to run just before it, late by that tick's own
# latency (issue 23). It stays within twice the tick: a claim holds its endpoint's lease
# until its run ends, and "Run now" waits for that.
CRONICORN_TICK_SECONDS = env_float("CRONICORN_TICK_SECONDS", 1.0, minimum=0.05)
CRONICORN_CLAIM_HORIZON_MS = env_int(
    "CRONICORN_CLAIM_HORIZON_MS", int(CRONICORN_TICK_SECONDS * 2000), minimum=0
)
if CRONICORN_CLAIM_HORIZON_MS > CRONICORN_TICK_SECONDS * 2000:
    raise ImproperlyConfigured(
        f"CRONICORN_CLAIM_HORIZON_MS={CRONICORN_CLAIM_HORIZON_MS} exceeds twice the tick "
        f"({CRONICORN_TICK_SECONDS} s); keep it at or below {int(CRONICORN_TICK_SECONDS * 2000)}."
    )
CRONICORN_BATCH_SIZE = env_int("CRONICORN_BATCH_SIZE", 1000, minimum=1)
# A claim's lease: how long a claim nobody renews stays taken. The process that holds a
# claim (waiting for its time, or with its run in flight) renews it every third of this,
# so a dead or stalled worker's claims are free again within this many seconds, whatever
# the endpoint's timeout (DESIGN "Life of a run", step 6).
CRONICORN_LEASE_SECONDS = env_int("CRONICORN_LEASE_SECONDS", 10, minimum=2)
# After a tenant's signing secret is rotated, requests carry signatures with both the new
# and the previous secret for this long, so receivers can switch within it.
CRONICORN_SIGNING_GRACE_SECONDS = env_int("CRONICORN_SIGNING_GRACE_SECONDS", 86_400, minimum=0)
CRONICORN_ZOMBIE_THRESHOLD_SECONDS = env_int("CRONICORN_ZOMBIE_THRESHOLD_SECONDS", 0, minimum=0)
CRONICORN_MAINTENANCE_SECONDS = env_int("CRONICORN_MAINTENANCE_SECONDS", 30, minimum=1)
CRONICORN_RUN_RETENTION_DAYS = env_int("CRONICORN_RUN_RETENTION_DAYS", 30, minimum=1)
CRONICORN_RUN_RETENTION_KEEP = env_int("CRONICORN_RUN_RETENTION_KEEP", 100, minimum=1)
CRONICORN_MAX_IN_FLIGHT = env_int("CRONICORN_MAX_IN_FLIGHT", 200, minimum=1)
# Event loops a scheduler process sends its requests on, each tenant's on one of them
# (endpoints/engine/executor.py): one tenant's burst does not delay another's sends.
CRONICORN_HTTP_LANES = env_int("CRONICORN_HTTP_LANES", 4, minimum=1)
CRONICORN_SHUTDOWN_TIMEOUT_SECONDS = env_int("CRONICORN_SHUTDOWN_TIMEOUT_SECONDS", 30, minimum=0)
# Requests per second to any one target host per tenant, for hosts the tenant's own
# host_rate_limits does not name (endpoints/engine/host_limits.py); 0, the default: none.
CRONICORN_HOST_RATE_LIMIT = env_int("CRONICORN_HOST_RATE_LIMIT", 0, minimum=0)

# The outbound guard (endpoints, webhooks, Apprise channels). Private, loopback and
# link-local targets are refused unless allowed: its own setting, never tied to DEBUG, so
# turning on debugging never opens the internal network to tenants.
CRONICORN_ALLOW_PRIVATE_ADDRESSES = env_bool("CRONICORN_ALLOW_PRIVATE_ADDRESSES", False)
CRONICORN_SSRF_ALLOWLIST = env_list("CRONICORN_SSRF_ALLOWLIST", [])
CRONICORN_MAX_REDIRECTS = env_int("CRONICORN_MAX_REDIRECTS", 5, minimum=0)
CRONICORN_USER_AGENT = env_str("CRONICORN_USER_AGENT", "Cronicorn-Django/0.1 (+scheduler)")

# Input caps (endpoints/validation.py, endpoints/config_io/): what a person or a file
# may store, so a hostile value costs a message, not memory or an LLM bill.
CRONICORN_MAX_HEADERS = env_int("CRONICORN_MAX_HEADERS", 50, minimum=1)
CRONICORN_MAX_HEADER_VALUE_CHARS = env_int("CRONICORN_MAX_HEADER_VALUE_CHARS", 8_192, minimum=1)
CRONICORN_MAX_BODY_BYTES = env_int("CRONICORN_MAX_BODY_BYTES", 65_536, minimum=1)
CRONICORN_MAX_DESCRIPTION_CHARS = env_int("CRONICORN_MAX_DESCRIPTION_CHARS", 4_000, minimum=1)
CRONICORN_MAX_JSON_DEPTH = env_int("CRONICORN_MAX_JSON_DEPTH", 32, minimum=2)
CRONICORN_MAX_CONFIG_BYTES = env_int("CRONICORN_MAX_CONFIG_BYTES", 2_000_000, minimum=1_000)

# Planner.
CRONICORN_PLANNER_BACKEND = env_choice("CRONICORN_PLANNER_BACKEND", "rules", ("rules", "llm"))
CRONICORN_PLANNER_SECONDS = env_int("CRONICORN_PLANNER_SECONDS", 60, minimum=1)
CRONICORN_PLANNER_BATCH_SIZE = env_int("CRONICORN_PLANNER_BATCH_SIZE", 20, minimum=1)
CRONICORN_LLM_BASE_URL = env_str("CRONICORN_LLM_BASE_URL", "https://api.openai.com/v1")
CRONICORN_LLM_API_KEY = env_str("CRONICORN_LLM_API_KEY", "")
CRONICORN_LLM_MODEL = env_str("CRONICORN_LLM_MODEL", "gpt-4o-mini")
CRONICORN_LLM_TEMPERATURE = env_float("CRONICORN_LLM_TEMPERATURE", 0.2, minimum=0.0)
CRONICORN_LLM_TIMEOUT_SECONDS = env_float("CRONICORN_LLM_TIMEOUT_SECONDS", 60.0, minimum=1.0)
CRONICORN_LLM_MAX_TOKENS = env_int("CRONICORN_LLM_MAX_TOKENS", 1500, minimum=1)
CRONICORN_LLM_MAX_RETRIES = env_int("CRONICORN_LLM_MAX_RETRIES", 2, minimum=0)
# The most tokens one analysis may spend: reserved from the tenant's monthly budget before
# its first request, settled to what it spent (planner/analysis.py). At least what a first
# request with the longest descriptions may cost; at most what a session row can hold.
CRONICORN_LLM_SESSION_TOKENS = env_int(
    "CRONICORN_LLM_SESSION_TOKENS", 50_000, minimum=20_000, maximum=10_000_000
)

# API. Requests per key (or per logged-in user), counted in the "api" cache: Redis when
# CRONICORN_API_CACHE_URL names one (so a fleet of web processes shares one count), this
# process's memory otherwise (each worker counts alone on one machine).
CRONICORN_API_RATE = env_str("CRONICORN_API_RATE", "1200/m")
# REST requests of one key (or user) in flight at once, counted in the same cache: one
# tenant's slow requests hold at most this many web workers (WEB_CONCURRENCY: set it
# above this, so other tenants always find a free one).
CRONICORN_API_CALLS_PER_KEY = env_int("CRONICORN_API_CALLS_PER_KEY", 4, minimum=1)
# The share of one CPU core the requests of one key (or user) may use, over windows of
# 10 s (api/fair_share.py): within its rate, a key of costly requests could otherwise
# keep every web worker busy. 0 (the default): no bound. Off by default: measured, it
# did not spare another tenant's runs (bench/noisy_neighbour.py: a client in a loop turns
# each refusal into another request, and the cores stay full).
CRONICORN_API_CPU_PER_KEY = env_float("CRONICORN_API_CPU_PER_KEY", 0.0, minimum=0.0)
CRONICORN_API_CACHE_URL = env_str("CRONICORN_API_CACHE_URL", "")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    "api": (
        {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": CRONICORN_API_CACHE_URL,
        }
        if CRONICORN_API_CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": "api"}
    ),
}
# The web server's own limits, each refused with a problem the OpenAPI document lists: a
# request line (method, path and query) over CRONICORN_WEB_MAX_REQUEST_LINE bytes (414;
# gunicorn's ceiling, so that every list's query parameters at their documented maximum
# fit, however their characters are encoded), more headers or longer ones than the next
# two (431), both read by cronicorn_site/gunicorn.conf.py; a body over
# DATA_UPLOAD_MAX_MEMORY_SIZE (413, Django's 2.5 MB default).
# How much the web processes (gunicorn's workers, manage.py mcp --http) yield the CPU to
# the scheduler on a machine they share (os.nice: 0 none, 19 most). The scheduler's promise
# is time, the web's is throughput: a tenant's load on the API must not make another
# tenant's runs late. On a machine or container of its own, a web process is unaffected.
CRONICORN_WEB_NICE = env_int("CRONICORN_WEB_NICE", 10, minimum=0, maximum=19)
# Where the CPU cannot be shared fairly enough (2 cores, a hostile tenant's requests
# filling both), the scheduler's processes (runscheduler, the Celery workers) and the web
# processes may keep to cores of their own: a CPU list as the kernel writes one ("0",
# "1-3", "0,2"), empty for any core (endpoints/cpus.py; bench/noisy_neighbour.py).
CRONICORN_SCHEDULER_CPUS = cpu_list(
    env_str("CRONICORN_SCHEDULER_CPUS", ""), "CRONICORN_SCHEDULER_CPUS"
)
CRONICORN_WEB_CPUS = cpu_list(env_str("CRONICORN_WEB_CPUS", ""), "CRONICORN_WEB_CPUS")
CRONICORN_WEB_MAX_REQUEST_LINE = 8190
CRONICORN_WEB_MAX_HEADER_BYTES = 8190
CRONICORN_WEB_MAX_HEADERS = 100
DATA_UPLOAD_MAX_MEMORY_SIZE = 2_621_440
# MCP over HTTP: open GET /mcp event streams (the server sends nothing on them) per key
# and per process, and how long one stays open.
CRONICORN_MCP_MAX_STREAMS_PER_KEY = env_int("CRONICORN_MCP_MAX_STREAMS_PER_KEY", 2, minimum=0)
CRONICORN_MCP_MAX_STREAMS = env_int("CRONICORN_MCP_MAX_STREAMS", 50, minimum=0)
CRONICORN_MCP_STREAM_SECONDS = env_float("CRONICORN_MCP_STREAM_SECONDS", 300.0, minimum=1.0)
# MCP tool calls (stdio and HTTP): each runs in a worker thread of its own; at most this
# many of one API key and this many threads in all at once, and how long a call beyond
# either waits for a place before it is refused.
CRONICORN_MCP_CALLS_PER_KEY = env_int("CRONICORN_MCP_CALLS_PER_KEY", 4, minimum=1)
CRONICORN_MCP_THREADS = env_int("CRONICORN_MCP_THREADS", 16, minimum=1)
CRONICORN_MCP_CALL_WAIT_SECONDS = env_float("CRONICORN_MCP_CALL_WAIT_SECONDS", 5.0, minimum=0.0)
# Alerts (notifications app): the notify cycle's period, how long a job's alerts wait for
# others to share one digest, and each send's deadline, retries and backoff.
CRONICORN_NOTIFY_SECONDS = env_float("CRONICORN_NOTIFY_SECONDS", 5.0, minimum=0.1)
CRONICORN_ALERT_DIGEST_SECONDS = env_float("CRONICORN_ALERT_DIGEST_SECONDS", 10.0, minimum=0.0)
CRONICORN_NOTIFY_TIMEOUT_SECONDS = env_float("CRONICORN_NOTIFY_TIMEOUT_SECONDS", 10.0, minimum=0.1)
CRONICORN_NOTIFY_MAX_ATTEMPTS = env_int("CRONICORN_NOTIFY_MAX_ATTEMPTS", 5, minimum=1)
CRONICORN_NOTIFY_RETRY_SECONDS = env_float("CRONICORN_NOTIFY_RETRY_SECONDS", 30.0, minimum=0.0)
CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER = env_int(
    "CRONICORN_NOTIFY_CHANNEL_FAILING_AFTER", 3, minimum=1
)
# Caps a tenant cannot exceed (docs/PRODUCTION.md, "Outbound guard and caps"): every alert
# is sent once per channel and recipient, so these bound what one failing endpoint costs
# the operator's SMTP server and reputation.
CRONICORN_MAX_CHANNELS_PER_TENANT = env_int("CRONICORN_MAX_CHANNELS_PER_TENANT", 20, minimum=1)
CRONICORN_MAX_RECIPIENTS_PER_CHANNEL = env_int(
    "CRONICORN_MAX_RECIPIENTS_PER_CHANNEL", 10, minimum=1
)
# The Apprise services a channel may use: each talks HTTP(S) or SMTP, which the outbound
# guard checks at connect time, and none reads files on this server. Others (fcm://,
# vapid://, syslog://, dbus://, mqtt://, ...) read key files, fetch URLs named in
# parameters, or use local or raw-socket transports: add them only for trusted tenants.
CRONICORN_APPRISE_SCHEMES = env_list(
    "CRONICORN_APPRISE_SCHEMES",
    [
        "json",
        "jsons",
        "xml",
        "xmls",
        "form",
        "forms",
        "slack",
        "discord",
        "workflow",
        "workflows",
        "tgram",
        "ntfy",
        "ntfys",
        "pagerduty",
        "opsgenie",
        "gotify",
        "gotifys",
        "mmost",
        "mmosts",
        "rocket",
        "rockets",
        "zulip",
        "gchat",
        "matrix",
        "matrixs",
        "pover",
        "pbul",
        "signal",
        "signals",
        "ifttt",
        "mailto",
        "mailtos",
    ],
)
# Sender threads per process: each channel sends in its own, so a hanging channel delays
# no other; more channels than this hanging at once wait for a free thread.
CRONICORN_NOTIFY_CONCURRENCY = env_int("CRONICORN_NOTIFY_CONCURRENCY", 16, minimum=1)
# Email alerts go through Django's email backend: SMTP by default, any backend by path.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_USE_SSL = env_bool("EMAIL_USE_SSL", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "cronicorn@localhost")

# Operations.
CRONICORN_METRICS_TOKEN = env_str("CRONICORN_METRICS_TOKEN", "")
# The fleet is "behind" (a warning in scheduler_status, /readyz, /metrics and the
# dashboard) when runs start later than this at p95 over a minute, or a due endpoint
# waits this long unclaimed.
CRONICORN_BEHIND_SECONDS = env_float("CRONICORN_BEHIND_SECONDS", 1.0, minimum=0.1)
CRONICORN_READY_MAX_TICK_AGE_SECONDS = env_int(
    "CRONICORN_READY_MAX_TICK_AGE_SECONDS", 30, minimum=1
)
# /readyz checks the broker unless the deployment runs the embedded `runscheduler` without
# one (then set false).
CRONICORN_BROKER_REQUIRED = env_bool("CRONICORN_BROKER_REQUIRED", True)
CRONICORN_LOG_FORMAT = env_choice("CRONICORN_LOG_FORMAT", "text", ("text", "json"))
CRONICORN_LOG_LEVEL = env_choice(
    "CRONICORN_LOG_LEVEL", "INFO", ("DEBUG", "INFO", "WARNING", "ERROR")
)

# Every process logs one way: Django loads this, Celery workers and beat reuse it through
# the setup_logging signal (cronicorn_site/celery.py). Scheduler lines carry endpoint_id,
# run_id, claim_token and source; secrets are masked in every line (cronicorn_site/logs.py).
_SCHEDULER_LOGGER = {"handlers": ["console"], "level": CRONICORN_LOG_LEVEL, "propagate": False}
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"scheduler_context": {"()": "cronicorn_site.logs.SchedulerContextFilter"}},
    "formatters": {
        "text": {"()": "cronicorn_site.logs.TextFormatter"},
        "json": {"()": "cronicorn_site.logs.JsonFormatter"},
    },
    "handlers": {
        "console": {
            "class": "logging.StreamHandler",
            "formatter": CRONICORN_LOG_FORMAT,
            "filters": ["scheduler_context"],
        },
    },
    "root": {"handlers": ["console"], "level": "WARNING"},
    "loggers": {
        "cronicorn": _SCHEDULER_LOGGER,
        "endpoints": _SCHEDULER_LOGGER,
        "planner": _SCHEDULER_LOGGER,
        # Celery's own DEBUG lines (bootsteps, every task signature) are not scheduler lines.
        "celery": {
            "handlers": ["console"],
            "level": "INFO" if CRONICORN_LOG_LEVEL == "DEBUG" else CRONICORN_LOG_LEVEL,
            "propagate": False,
        },
        # One line per beat send and per task received/succeeded would drown the rest.
        "celery.beat": {"level": "WARNING"},
        "celery.app.trace": {"level": "WARNING"},
        "celery.worker.strategy": {"level": "WARNING"},
        # Apprise logs a channel's URL, tokens included; notifications/transports.py
        # captures its reasons for the delivery record instead, scrubbed.
        "apprise": {"handlers": [], "level": "CRITICAL", "propagate": False},
    },
}

# Queues: tick and maintenance are light; execute is I/O-bound (threads pool);
# planner may wait on an LLM for a minute.
CELERY_TASK_ROUTES = {
    "cronicorn.tick": {"queue": "tick"},
    "cronicorn.execute": {"queue": "execute"},
    "cronicorn.backfill_cycle": {"queue": "execute"},
    "cronicorn.sweep_zombies": {"queue": "maintenance"},
    "cronicorn.prune_runs": {"queue": "maintenance"},
    "cronicorn.plan_cycle": {"queue": "planner"},
    "cronicorn.analyze_endpoint": {"queue": "planner"},
    "cronicorn.notify_cycle": {"queue": "notify"},
}
# ``runscheduler``'s planner and notify loops (the same cycles as the two tasks above), by
# name: the site wires the apps together, so the engine's app never imports them. An app
# left out of INSTALLED_APPS (or a name set to "") leaves its loop off.
CRONICORN_EMBEDDED_CYCLES = {
    "plan": "planner.analysis.plan_cycle",
    "notify": "notifications.alerts.notify_cycle",
}
CELERY_BEAT_SCHEDULE = {
    # A tick that is not taken within its own period is worthless: the next one replaces it.
    "tick": {
        "task": "cronicorn.tick",
        "schedule": CRONICORN_TICK_SECONDS,
        "options": {"expires": CRONICORN_TICK_SECONDS},
    },
    # Backfills (endpoints.engine.backfilling): a pass per tick, worthless once the next comes.
    "backfill-cycle": {
        "task": "cronicorn.backfill_cycle",
        "schedule": CRONICORN_TICK_SECONDS,
        "options": {"expires": CRONICORN_TICK_SECONDS},
    },
    "sweep-zombies": {"task": "cronicorn.sweep_zombies", "schedule": CRONICORN_MAINTENANCE_SECONDS},
    "prune-runs": {"task": "cronicorn.prune_runs", "schedule": 3600.0},
    "plan-cycle": {
        "task": "cronicorn.plan_cycle",
        "schedule": float(CRONICORN_PLANNER_SECONDS),
        "options": {"expires": float(CRONICORN_PLANNER_SECONDS)},
    },
    # Alerts are detected and sent apart from runs: a dead channel never delays one.
    "notify-cycle": {
        "task": "cronicorn.notify_cycle",
        "schedule": CRONICORN_NOTIFY_SECONDS,
        "options": {"expires": CRONICORN_NOTIFY_SECONDS},
    },
}
