"""Settings for Runcrate Clusters, read from typed environment variables.

Embedded defaults (no variables set, DEBUG on): SQLite in var/, the in-memory channel
layer and eager Celery. `make run` starts an embedded Redis and sets REDIS_URL itself.
Production sets DEBUG=0, SECRET_KEY, DATABASE_URL, REDIS_URL, ALLOWED_HOSTS, EMAIL_*,
STRIPE_* — see docs/configuration.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

import dj_database_url
from csp.constants import NONE, SELF, UNSAFE_INLINE
from django.core.exceptions import ImproperlyConfigured

from config.env import env_bool, env_decimal, env_int, env_list, env_sha256, env_str

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("RUNCRATE_VAR_DIR", str(BASE_DIR / "var")))

TESTING = "pytest" in sys.modules or env_bool("RUNCRATE_TESTING", False)
DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY") or ""
if not SECRET_KEY:
    if not (DEBUG or TESTING):
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off")
    SECRET_KEY = "insecure-development-key-never-use-in-production-0123456789abcdef"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG or TESTING else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])
SITE_URL = env_str("SITE_URL", "http://127.0.0.1:8000").rstrip("/")

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django.forms",  # the built-in widget templates, for FORM_RENDERER below
    "channels",
    "django_htmx",
    "template_partials",
    "csp",
    "allauth",
    "allauth.account",
    "allauth.mfa",
    "allauth.socialaccount",
    "allauth.socialaccount.providers.openid_connect",
    "accounts",
    "offers",
    "clusters",
    "billing",
    "api",
    "quotes",
    "notifications",
    "webhooks",
    "metrics",
    "audit",
]

MIDDLEWARE = [
    # Outermost, so a saturated connection pool anywhere below answers 503, never 500.
    "config.middleware.DatabaseBusyMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # django-csp's, also on error pages under DEBUG; below it, the product's own error pages
    # whatever DEBUG says (config.error_pages).
    "config.error_pages.CSPOnEveryPageMiddleware",
    "config.error_pages.ProductErrorPagesMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Below WhiteNoise (static files keep their caching), above everything that answers.
    "config.middleware.NoStoreMiddleware",
    "config.middleware.RejectNulBytesMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "allauth.account.middleware.AccountMiddleware",
    "accounts.middleware.CurrentWorkspaceMiddleware",
    # A workspace that requires single sign-on: after the workspace is known.
    "accounts.sso.SingleSignOnMiddleware",
    # Who is acting, for the audit log (audit.recording): after authentication.
    "audit.middleware.AuditRequestMiddleware",
]

ROOT_URLCONF = "config.urls"
# Django's DEBUG 500/400 pages (traceback, settings) show the product's page; the log keeps the traceback.
DEFAULT_EXCEPTION_REPORTER = "config.error_pages.ProductPageReporter"
ASGI_APPLICATION = "config.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "builtins": ["config.money"],  # {{ amount|money }}
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "accounts.context_processors.tenancy",
                "clusters.context_processors.cluster_rules",
                "accounts.context_processors.dev_mail",
            ],
        },
    }
]

# Forms render through the project's templates, so templates/django/forms/field.html is every
# field's group (`field.as_field_group`): label, widget, help text and errors, with the ids the
# widget's aria-describedby names.
FORM_RENDERER = "django.forms.renderers.TemplatesSetting"

DATABASE_URL = env_str("DATABASE_URL")
# PostgreSQL connections per process are bounded by a pool (psycopg's, through Django): a burst
# of requests or a wide node operation waits for one of DB_POOL_SIZE connections instead of
# opening its own, and one that waits DB_POOL_TIMEOUT seconds is answered 503 with Retry-After
# (config.middleware). DB_POOL_SIZE=0 turns the pool off (then CONN_MAX_AGE applies).
# Under ASGI every sync request runs in a thread of its own, so a burst of N requests is N
# threads queueing for the pool: the timeout is long enough for a burst of 200 creates (about
# 10 s of work at ~20/s, creates serialise on the workspace row) to be served, not refused.
DB_POOL_SIZE = env_int("DB_POOL_SIZE", 8)
DB_POOL_TIMEOUT = env_int("DB_POOL_TIMEOUT", 30)
if DATABASE_URL:
    DATABASES = {"default": dj_database_url.parse(DATABASE_URL, conn_max_age=env_int("CONN_MAX_AGE", 0))}
    if DATABASES["default"]["ENGINE"].endswith("postgresql") and DB_POOL_SIZE > 0:
        # A pooled connection goes back to the pool at the end of each request or task, so
        # Django's own persistence must stay off.
        DATABASES["default"]["CONN_MAX_AGE"] = 0
        DATABASES["default"].setdefault("OPTIONS", {})["pool"] = {
            "min_size": 1, "max_size": DB_POOL_SIZE, "timeout": DB_POOL_TIMEOUT,
        }
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": str(VAR_DIR / "db.sqlite3"),
            "OPTIONS": {
                # WAL lets the web, worker and beat processes read while one writes;
                # IMMEDIATE takes the write lock up front instead of failing on upgrade.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 10}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    "django.contrib.auth.backends.ModelBackend",
    "allauth.account.auth_backends.AuthenticationBackend",
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "clusters:list"
LOGOUT_REDIRECT_URL = "login"

# Accounts (django-allauth, see docs/accounts.md): people sign up with an email address and
# sign in with it or with their username (operators and the seeded `demo` have usernames).
ACCOUNT_ADAPTER = "accounts.adapter.AccountAdapter"
ACCOUNT_FORMS = {"login": "accounts.forms.SignInForm"}
ACCOUNT_LOGIN_METHODS = {"email", "username"}
ACCOUNT_SIGNUP_FIELDS = ["email*", "password1*", "password2*"]
ACCOUNT_UNIQUE_EMAIL = True
ACCOUNT_EMAIL_VERIFICATION = "mandatory"
ACCOUNT_CONFIRM_EMAIL_ON_GET = False  # a mail scanner following the link must not verify it
ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION = True
ACCOUNT_LOGIN_ON_PASSWORD_RESET = False
ACCOUNT_LOGOUT_ON_PASSWORD_CHANGE = False
ACCOUNT_EMAIL_SUBJECT_PREFIX = ""
ACCOUNT_DEFAULT_HTTP_PROTOCOL = "http" if DEBUG or TESTING else "https"
# Signing up with a taken address says so on the field: a customer who forgot they have an
# account learns it at once. Sign-up and reset are rate-limited, which bounds what probing learns.
ACCOUNT_PREVENT_ENUMERATION = False
ACCOUNT_SESSION_REMEMBER = None  # the sign-in form offers "Remember me"
# allauth's own limits (signup, password reset, confirmation emails; failed sign-ins 10/min per
# address), counted in the default cache (Redis in production). Not its 5-per-account lock,
# which anyone could trigger to keep someone out: failed sign-ins back off per client and
# account instead (accounts.signin_throttle).
ACCOUNT_RATE_LIMITS_ENABLED = env_bool("ACCOUNT_RATE_LIMITS_ENABLED", True)
ACCOUNT_RATE_LIMITS: dict[str, str] | bool = {"login_failed": "10/m/ip"}
if not ACCOUNT_RATE_LIMITS_ENABLED:
    ACCOUNT_RATE_LIMITS = False
SIGNIN_FREE_ATTEMPTS = env_int("SIGNIN_FREE_ATTEMPTS", 5)
SIGNIN_BACKOFF_MAX_SECONDS = env_int("SIGNIN_BACKOFF_MAX_SECONDS", 900)
# Single sign-on (docs/accounts.md): each workspace may connect its own OpenID Connect
# provider; accounts.sso builds allauth's app for it from the workspace's row. Nobody is
# signed in to an existing account by an email address a provider asserts: a provider signs
# in only the accounts linked to it, and creates one only for an address invited to its
# workspace.
SOCIALACCOUNT_ADAPTER = "accounts.sso.SocialAccountAdapter"
SOCIALACCOUNT_EMAIL_AUTHENTICATION = False
SOCIALACCOUNT_EMAIL_AUTHENTICATION_AUTO_CONNECT = False
SOCIALACCOUNT_STORE_TOKENS = False
SOCIALACCOUNT_OPENID_CONNECT_URL_PREFIX = "sso"
# The provider's discovery document, token and user info are fetched with this timeout (s).
SOCIALACCOUNT_REQUESTS_TIMEOUT = 10
MFA_SUPPORTED_TYPES = ["totp", "recovery_codes"]
MFA_TOTP_ISSUER = "Runcrate Clusters"
# Invitations to a workspace expire after this many days.
INVITATION_MAX_AGE_DAYS = env_int("INVITATION_MAX_AGE_DAYS", 7)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = BASE_DIR / "staticfiles"
# Without a collectstatic (`make run`, the tests) whitenoise serves the app's own static
# directories as they are, and does not look for STATIC_ROOT.
WHITENOISE_USE_FINDERS = WHITENOISE_AUTOREFRESH = DEBUG or TESTING
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG or TESTING
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Redis carries the channel layer and the Celery broker. Without it (plain `manage.py`
# commands, tests on the embedded defaults) the in-memory layer and eager tasks stand in.
REDIS_URL = env_str("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL], "prefix": env_str("CHANNEL_PREFIX", "runcrate")},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
# The cache holds rate-limit counters, which every web process must share: Redis when there
# is one. Tests keep the per-process memory cache so their counters start empty
# (tests/live/test_real_worker.py runs the limiter, and a real worker, on Redis).
# While Redis is down the cache fails open (config.cache): a miss for every read, a log line.
if REDIS_URL and not TESTING:
    from config.cache import redis_cache

    CACHES = {"default": redis_cache(REDIS_URL, prefix=env_str("CACHE_PREFIX", "runcrate-cache"))}
else:
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}


def _celery_url(url: str | None) -> str:
    if not url:
        return "memory://"
    # Celery spells a unix-socket Redis as redis+socket:// where redis-py says unix://.
    return url.replace("unix://", "redis+socket://", 1) if url.startswith("unix://") else url


CELERY_BROKER_URL = _celery_url(REDIS_URL)
CELERY_RESULT_BACKEND = None
# Tests run tasks inline (and drive the lifecycle by hand); a test that wants a real worker
# starts one itself.
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", not REDIS_URL or TESTING)
CELERY_TASK_EAGER_PROPAGATES = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_IGNORE_RESULT = True
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# A worker reconnects to Redis for as long as it is down; a publish (after a commit) gives up
# within about a second and is logged, and the sweep re-drives what it would have queued.
CELERY_BROKER_CONNECTION_MAX_RETRIES = None
# A Redis that accepts connections but never answers (stopped, swapping, wedged) must not hold a
# publish, and with it the request that committed a create, for more than a few seconds: every
# read on the broker's socket gives up after socket_timeout (the worker's own blocking reads
# wait 1 s at a time, below it).
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {"socket_connect_timeout": 2, "socket_timeout": 2}
# Deployments (and test runs) sharing one Redis keep their queues apart, as CHANNEL_PREFIX and
# CACHE_PREFIX keep their channels and cache keys.
if CELERY_KEY_PREFIX := env_str("CELERY_KEY_PREFIX", ""):
    CELERY_BROKER_TRANSPORT_OPTIONS["global_keyprefix"] = CELERY_KEY_PREFIX
CELERY_TASK_PUBLISH_RETRY_POLICY = {"max_retries": 1, "interval_start": 0, "interval_step": 0.2, "interval_max": 0.5}
# Webhook deliveries wait on customers' servers: they have a queue of their own, served by a
# worker of its own (`celery -A config worker -Q webhooks`; config.stack starts one), so cluster
# work never queues behind a slow receiver (docs/webhooks.md).
WEBHOOK_QUEUE = "webhooks"
CELERY_TASK_ROUTES = {"webhooks.tasks.send_webhook": {"queue": WEBHOOK_QUEUE}}
SWEEP_INTERVAL_SECONDS = env_int("SWEEP_INTERVAL_SECONDS", 10)
METERING_INTERVAL_SECONDS = env_int("METERING_INTERVAL_SECONDS", 60)
# Node health (clusters.node_health): a round per ready cluster every interval, one SSH session per
# node; a round that runs longer than NODE_HEALTH_ROUND_SECONDS is cut off.
NODE_HEALTH_INTERVAL_SECONDS = env_int("NODE_HEALTH_INTERVAL_SECONDS", 30)
NODE_HEALTH_ROUND_SECONDS = env_int("NODE_HEALTH_ROUND_SECONDS", 60)
NODE_HEALTH_MAX_CLUSTERS_PER_ROUND = env_int("NODE_HEALTH_MAX_CLUSTERS_PER_ROUND", 500)
if NODE_HEALTH_INTERVAL_SECONDS < 5 or NODE_HEALTH_ROUND_SECONDS < 10:
    raise ImproperlyConfigured("NODE_HEALTH_INTERVAL_SECONDS must be at least 5 and NODE_HEALTH_ROUND_SECONDS at least 10")
# Node metrics (metrics/, docs/metrics.md): a round per ready cluster every interval (5-60 s),
# cut off after METRICS_ROUND_SECONDS; fine samples kept an hour, 5-minute averages 7 days.
METRICS_INTERVAL_SECONDS = env_int("METRICS_INTERVAL_SECONDS", 10)
METRICS_ROUND_SECONDS = env_int("METRICS_ROUND_SECONDS", 30)
METRICS_MAX_CLUSTERS_PER_ROUND = env_int("METRICS_MAX_CLUSTERS_PER_ROUND", 500)
METRICS_FINE_RETENTION_SECONDS = env_int("METRICS_FINE_RETENTION_SECONDS", 3600)
METRICS_COARSE_STEP_SECONDS = env_int("METRICS_COARSE_STEP_SECONDS", 300)
METRICS_COARSE_RETENTION_SECONDS = env_int("METRICS_COARSE_RETENTION_SECONDS", 7 * 86400)
if not 5 <= METRICS_INTERVAL_SECONDS <= 60 or METRICS_COARSE_STEP_SECONDS < METRICS_INTERVAL_SECONDS:
    raise ImproperlyConfigured("METRICS_INTERVAL_SECONDS must be 5-60 and at most METRICS_COARSE_STEP_SECONDS")
# Idle spend (metrics.idle): a machine is idle under these; the hours are per environment.
IDLE_CPU_PERCENT = env_int("IDLE_CPU_PERCENT", 5)
IDLE_GPU_PERCENT = env_int("IDLE_GPU_PERCENT", 5)
# Fleet hosts: how often their facts are read to grade them again when due (daily, or at once
# after their runtime or GPU driver changed), and how often a down host is asked whether it
# answers again (then its leftover machines are wiped before its slots are sold).
HOST_WATCH_SECONDS = env_int("HOST_WATCH_SECONDS", 600)
HOST_RETURN_SECONDS = env_int("HOST_RETURN_SECONDS", 60)
CELERY_BEAT_SCHEDULE = {
    "sweep-clusters": {"task": "clusters.tasks.sweep_clusters", "schedule": float(SWEEP_INTERVAL_SECONDS)},
    "meter-and-enforce-billing": {"task": "clusters.tasks.meter_and_enforce", "schedule": float(METERING_INTERVAL_SECONDS)},
    "send-pending-notifications": {"task": "notifications.tasks.send_pending_notifications", "schedule": 60.0},
    "check-node-health": {"task": "clusters.node_health.tasks.check_node_health", "schedule": float(NODE_HEALTH_INTERVAL_SECONDS)},
    "sweep-network-tests": {"task": "clusters.network_test.tasks.sweep_network_tests", "schedule": float(SWEEP_INTERVAL_SECONDS)},
    "send-due-webhooks": {"task": "webhooks.tasks.send_due_webhooks", "schedule": 15.0},
    "collect-metrics": {"task": "metrics.tasks.collect_metrics", "schedule": float(METRICS_INTERVAL_SECONDS)},
    "roll-up-metrics": {"task": "metrics.tasks.roll_up_metrics", "schedule": 60.0},
    "prune-audit-log": {"task": "audit.tasks.prune_audit_log", "schedule": 3600.0},
    "watch-hosts": {"task": "offers.tasks.watch_hosts", "schedule": float(HOST_WATCH_SECONDS)},
    "wipe-returned-hosts": {"task": "clusters.tasks.wipe_returned_hosts", "schedule": float(HOST_RETURN_SECONDS)},
}
# How long the audit log keeps an entry (docs/security.md); then audit.tasks.prune_audit_log deletes it.
AUDIT_RETENTION_DAYS = env_int("AUDIT_RETENTION_DAYS", 400)
if AUDIT_RETENTION_DAYS < 1:
    raise ImproperlyConfigured("AUDIT_RETENTION_DAYS must be at least 1")
# The network test (clusters.network_test): run once by itself when a cluster becomes ready
# (off in tests, which start it where they mean to). A running test's runner beats every
# NETWORK_TEST_HEARTBEAT_SECONDS; one whose last beat is NETWORK_TEST_STALE_SECONDS old lost
# its worker (the sweep fails it, and a new test may start).
NETWORK_TEST_AFTER_READY = env_bool("NETWORK_TEST_AFTER_READY", not TESTING)
NETWORK_TEST_HEARTBEAT_SECONDS = env_int("NETWORK_TEST_HEARTBEAT_SECONDS", 5)
NETWORK_TEST_STALE_SECONDS = env_int("NETWORK_TEST_STALE_SECONDS", 20)
if NETWORK_TEST_STALE_SECONDS < 3 * NETWORK_TEST_HEARTBEAT_SECONDS:
    raise ImproperlyConfigured("NETWORK_TEST_STALE_SECONDS must be at least three NETWORK_TEST_HEARTBEAT_SECONDS")

# The lifecycle: how long a step waits before the reconciler looks again when the provider
# cannot say when its machines will have news (a booting machine's news is looked at when it is
# due, not polled), and whether a task re-queues itself (off in tests, which drive every step by
# hand). A pass is queued at most CLUSTER_LOOK_AHEAD_SECONDS ahead: the broker redelivers a
# task held past its visibility timeout, so news further off is looked at again by then.
CLUSTER_POLL_SECONDS = env_int("CLUSTER_POLL_SECONDS", 2)
CLUSTER_LOOK_AHEAD_SECONDS = env_int("CLUSTER_LOOK_AHEAD_SECONDS", 300)
CLUSTER_SELF_RESCHEDULE = env_bool("CLUSTER_SELF_RESCHEDULE", not TESTING)
# A pass holds its cluster's lease this long and renews it every third of that while it runs,
# so a worker that dies frees its clusters within seconds (docs/architecture.md, Lifecycle).
CLUSTER_LEASE_SECONDS = env_int("CLUSTER_LEASE_SECONDS", 15)
# A pass (or network test) queued to start at T that has not started by T + this is taken for
# lost (its worker died holding it, or the broker lost it), and the sweep queues another. Short,
# because a second pass is harmless: the lease lets one run at a time and every step is
# idempotent; a busy pool at worst runs one extra pass.
CLUSTER_QUEUED_GRACE_SECONDS = env_int("CLUSTER_QUEUED_GRACE_SECONDS", 15)
DEFAULT_PROVIDER = env_str("DEFAULT_PROVIDER", "simulated")
# The simulated provider's join works this long inside the worker, as a real one over SSH does.
SIMULATED_JOIN_WORK_SECONDS = float(env_decimal("SIMULATED_JOIN_WORK_SECONDS", "0"))
MINIMUM_CREATE_BALANCE = env_decimal("MINIMUM_CREATE_BALANCE", "10.00")
# Kubernetes on real machines (the `ssh` provider) applies two manifests fetched by version
# and applied only when their sha256 matches. Unverified here: no machine of this project can
# run a kubelet or reach the manifests, so the checksums ship empty and Kubernetes on such
# offers is refused until an operator has checked both files and set both (docs/nodeops.md).
KUBERNETES_FLANNEL_VERSION = env_str("KUBERNETES_FLANNEL_VERSION", "v0.26.1")
KUBERNETES_FLANNEL_SHA256 = env_sha256("KUBERNETES_FLANNEL_SHA256")
KUBERNETES_DEVICE_PLUGIN_VERSION = env_str("KUBERNETES_DEVICE_PLUGIN_VERSION", "v0.16.2")
KUBERNETES_DEVICE_PLUGIN_SHA256 = env_sha256("KUBERNETES_DEVICE_PLUGIN_SHA256")
# The `local` provider: where its sandboxed machines keep their SSH servers and roots, and
# which SSH server they run ("openssh" when sshd is installed, else "asyncssh").
LOCAL_MACHINES_DIR = env_str("LOCAL_MACHINES_DIR", str(VAR_DIR / "local-machines"))
LOCAL_SSH_SERVER = env_str("LOCAL_SSH_SERVER", "openssh")
# How the `local` provider runs machines: "namespaces" (real Linux nodes; needs Linux and
# root), "sandbox" (loopback SSH endpoints), or "auto" (namespaces where this computer can).
LOCAL_NODES = env_str("LOCAL_NODES", "auto")
if LOCAL_NODES not in ("auto", "namespaces", "sandbox"):
    raise ImproperlyConfigured(f"LOCAL_NODES must be auto, namespaces or sandbox, not {LOCAL_NODES!r}")
# What one real local machine may use of this computer: the machine type's own memory,
# disk and CPUs, capped here so 64 of them fit on one computer (limits, not reservations).
# Its memory cgroup holds its memory alone (its /dev/shm and /run count inside it); its disk
# and /shared are filesystems of those sizes on this computer's disk.
LOCAL_NODE_MEMORY_MB = env_int("LOCAL_NODE_MEMORY_MB", 4096)
LOCAL_NODE_DISK_MB = env_int("LOCAL_NODE_DISK_MB", 4096)
LOCAL_NODE_SHARED_MB = env_int("LOCAL_NODE_SHARED_MB", 2048)
LOCAL_NODE_PIDS = env_int("LOCAL_NODE_PIDS", 4096)
for _name in ("LOCAL_NODE_MEMORY_MB", "LOCAL_NODE_DISK_MB", "LOCAL_NODE_SHARED_MB", "LOCAL_NODE_PIDS"):
    if globals()[_name] < 64:
        raise ImproperlyConfigured(f"{_name} must be at least 64, not {globals()[_name]}")
# What the kernel counts per user, per real local machine: namespaces of each kind its root
# may make, and inotify instances. Kept in a user namespace above the machine's own, which its
# root cannot raise (docs/security.md, "Tenant-facing limits").
LOCAL_NODE_NAMESPACES = env_int("LOCAL_NODE_NAMESPACES", 1024)
LOCAL_NODE_INOTIFY_INSTANCES = env_int("LOCAL_NODE_INOTIFY_INSTANCES", 128)
for _name in ("LOCAL_NODE_NAMESPACES", "LOCAL_NODE_INOTIFY_INSTANCES"):
    if globals()[_name] < 8:
        raise ImproperlyConfigured(f"{_name} must be at least 8, not {globals()[_name]}")
# What this computer keeps for itself and the control plane whatever its nodes do: all its
# nodes together may use its memory less LOCAL_NODES_MEMORY_RESERVE_MB and its process count
# (kernel.pid_max) less LOCAL_NODES_PIDS_RESERVE (one parent cgroup). The defaults fit a
# 24 GiB, 32,768-pid computer: nodes share ~19.5 GiB and 24,576 processes.
LOCAL_NODES_MEMORY_RESERVE_MB = env_int("LOCAL_NODES_MEMORY_RESERVE_MB", 4096)
LOCAL_NODES_PIDS_RESERVE = env_int("LOCAL_NODES_PIDS_RESERVE", 8192)
if LOCAL_NODES_MEMORY_RESERVE_MB < 512:
    raise ImproperlyConfigured(f"LOCAL_NODES_MEMORY_RESERVE_MB must be at least 512, not {LOCAL_NODES_MEMORY_RESERVE_MB}")
if LOCAL_NODES_PIDS_RESERVE < 1024:
    raise ImproperlyConfigured(f"LOCAL_NODES_PIDS_RESERVE must be at least 1024, not {LOCAL_NODES_PIDS_RESERVE}")
# Where volumes keep their data (a mounted filesystem in production).
VOLUMES_DIR = env_str("VOLUMES_DIR", str(VAR_DIR / "volumes"))

EMAIL_HOST = env_str("EMAIL_HOST", "")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD", "")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10)
EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.smtp.EmailBackend" if EMAIL_HOST else "django.core.mail.backends.filebased.EmailBackend",
)
EMAIL_FILE_PATH = VAR_DIR / "mail"
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "Runcrate Clusters <clusters@runcrate.example>")
SALES_EMAIL = env_str("SALES_EMAIL", "sales@runcrate.example")
# Who hears that a host was taken out of sale (besides every active staff user with an
# address): comma-separated.
OPERATOR_EMAILS = [a.strip() for a in env_str("OPERATOR_EMAILS", "").split(",") if a.strip()]
# Notifications: a failed SMTP send is retried after 30 s, 60 s, 120 s … (capped), and given
# up after NOTIFICATION_MAX_ATTEMPTS; the beat re-queues pending ones whose task was lost.
NOTIFICATION_RETRY_BASE_SECONDS = env_int("NOTIFICATION_RETRY_BASE_SECONDS", 30)
NOTIFICATION_RETRY_MAX_SECONDS = env_int("NOTIFICATION_RETRY_MAX_SECONDS", 3600)
NOTIFICATION_MAX_ATTEMPTS = env_int("NOTIFICATION_MAX_ATTEMPTS", 10)
NOTIFICATION_REQUEUE_AFTER_SECONDS = env_int("NOTIFICATION_REQUEUE_AFTER_SECONDS", 300)
# Webhooks (webhooks/, docs/webhooks.md): a failed delivery is tried again after 30 s, then
# 4x longer each time (capped at 6 h), for up to 3 days from the event; each request is cut
# off WEBHOOK_TIMEOUT_SECONDS after it starts, all of it (connect, headers and body). Endpoints
# must be https:// and resolve only to public addresses; development and the tests may use
# http:// and loopback (never private ranges).
WEBHOOK_RETRY_BASE_SECONDS = env_int("WEBHOOK_RETRY_BASE_SECONDS", 30)
WEBHOOK_RETRY_FACTOR = env_int("WEBHOOK_RETRY_FACTOR", 4)
WEBHOOK_RETRY_MAX_SECONDS = env_int("WEBHOOK_RETRY_MAX_SECONDS", 6 * 3600)
WEBHOOK_RETRY_WINDOW_SECONDS = env_int("WEBHOOK_RETRY_WINDOW_SECONDS", 3 * 86400)
WEBHOOK_TIMEOUT_SECONDS = env_int("WEBHOOK_TIMEOUT_SECONDS", 10)
# A queued attempt whose task never ran is queued again by the sweep after this long.
WEBHOOK_QUEUE_LEASE_SECONDS = env_int("WEBHOOK_QUEUE_LEASE_SECONDS", 120)
# The task's soft time limit is 60 s, and a claimed attempt must end well inside its lease.
if not 1 <= WEBHOOK_TIMEOUT_SECONDS <= 30 or WEBHOOK_QUEUE_LEASE_SECONDS < WEBHOOK_TIMEOUT_SECONDS + 60:
    raise ImproperlyConfigured("WEBHOOK_TIMEOUT_SECONDS must be 1-30 and WEBHOOK_QUEUE_LEASE_SECONDS at least 60 more")
WEBHOOK_ALLOW_LOOPBACK = env_bool("WEBHOOK_ALLOW_LOOPBACK", DEBUG or TESTING)
WEBHOOK_REQUIRE_HTTPS = env_bool("WEBHOOK_REQUIRE_HTTPS", not (DEBUG or TESTING))
# Request a quote: at most QUOTE_RATE_LIMIT submissions per client address per window.
QUOTE_RATE_LIMIT = env_int("QUOTE_RATE_LIMIT", 5)
QUOTE_RATE_WINDOW_SECONDS = env_int("QUOTE_RATE_WINDOW_SECONDS", 3600)

# The JSON API: at most API_RATE_LIMIT requests per key per window (0 turns the limit off),
# counted in the cache named API_RATE_CACHE (Redis in production, shared by every web process).
API_RATE_LIMIT = env_int("API_RATE_LIMIT", 600)
API_RATE_WINDOW_SECONDS = env_int("API_RATE_WINDOW_SECONDS", 60)
API_RATE_CACHE = "default"

# Content-Security-Policy (django-csp): script only from this site's static files — no inline
# <script>, no on…= handlers, no eval — so text a user typed can never run in someone
# else's browser. Styles may be inline (style attributes, the API reference's <style>):
# no user text is rendered into either.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "script-src-attr": [NONE],
        "style-src": [SELF, UNSAFE_INLINE],
        "img-src": [SELF, "data:"],
        "connect-src": [SELF],  # htmx requests and the live-status WebSocket, same origin
        # A top-up form posts here and is redirected on to Stripe Checkout.
        "form-action": [SELF, "https://checkout.stripe.com"],
        "frame-ancestors": [NONE],
        "base-uri": [NONE],
        "object-src": [NONE],
    }
}

# Node secrets (WireGuard keys, munge key, join tokens) are encrypted at rest with this Fernet
# key (config.sealing). Production must set it (`python -c "from cryptography.fernet import
# Fernet; print(Fernet.generate_key().decode())"`); development derives one from SECRET_KEY.
NODE_SECRETS_KEY = env_str("NODE_SECRETS_KEY", "")
if not NODE_SECRETS_KEY:
    if not (DEBUG or TESTING):
        raise ImproperlyConfigured("NODE_SECRETS_KEY must be set when DEBUG is off")
    import base64
    import hashlib

    NODE_SECRETS_KEY = base64.urlsafe_b64encode(hashlib.sha256(f"node-secrets:{SECRET_KEY}".encode()).digest()).decode()

STRIPE_SECRET_KEY = env_str("STRIPE_SECRET_KEY", "")
STRIPE_PUBLISHABLE_KEY = env_str("STRIPE_PUBLISHABLE_KEY", "")
STRIPE_WEBHOOK_SECRET = env_str("STRIPE_WEBHOOK_SECRET", "")
# Without the webhook secret no payment could ever be credited (every event fails its
# signature check): with Stripe keys set, production refuses to start instead.
if (STRIPE_SECRET_KEY or STRIPE_PUBLISHABLE_KEY) and not STRIPE_WEBHOOK_SECRET and not (DEBUG or TESTING):
    raise ImproperlyConfigured("STRIPE_WEBHOOK_SECRET must be set when STRIPE_SECRET_KEY or STRIPE_PUBLISHABLE_KEY is")

if not DEBUG and not TESTING:
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 31536000)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    SECURE_CONTENT_TYPE_NOSNIFF = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}},
}
