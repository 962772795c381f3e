"""Settings for every deployment, read from the environment.

Defaults are embedded and need no server: SQLite and a filesystem Celery broker inside
HARNESS_DATA_DIR. Production (DEPLOYMENT=production) refuses to start without a
SECRET_KEY or with DEBUG on. See docs/operations.md for every variable.
"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

from config.env import (
    env_bool,
    env_float,
    env_int,
    env_list,
    env_path,
    env_str,
    env_urls,
    parse_database_url,
    xdist_worker_isolate,
)
from harness_app import queues

BASE_DIR = Path(__file__).resolve().parent.parent

DEPLOYMENT = env_str("DEPLOYMENT", "development")
if DEPLOYMENT not in {"development", "production"}:
    raise ImproperlyConfigured(f"DEPLOYMENT={DEPLOYMENT!r}; use development or production")
PRODUCTION = DEPLOYMENT == "production"

DEBUG = env_bool("DEBUG", not PRODUCTION)
SECRET_KEY = env_str("SECRET_KEY", "")
if PRODUCTION and not SECRET_KEY:
    raise ImproperlyConfigured(
        "DEPLOYMENT=production needs SECRET_KEY: sessions and tokens would be forgeable "
        "with a built-in key. Set SECRET_KEY to a long random string."
    )
if PRODUCTION and DEBUG:
    raise ImproperlyConfigured(
        "DEPLOYMENT=production with DEBUG on would leak settings and tracebacks to users. "
        "Unset DEBUG or set DEBUG=0."
    )
SECRET_KEY = SECRET_KEY or "development-only-key-never-use-in-production"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", [] if PRODUCTION else ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

# Everything the application writes outside the database: the SQLite file, the embedded
# broker's queue folders, retrieval indexes, exports.
# Under pytest-xdist each test process gets its own data folder and broker database.
TEST_WORKER = xdist_worker_isolate()
DATA_DIR = env_path("HARNESS_DATA_DIR", BASE_DIR / "var")
DATA_DIR.mkdir(parents=True, exist_ok=True)

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "rest_framework.authtoken",
    "drf_spectacular",
    "drf_spectacular_sidecar",  # Swagger UI's files, served as static files (no CDN)
    "js_lib_htmx",
    "harness_app",
    "trajectories",
    "training",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    # Static files answer here, before sessions and the login check: compressed, and cached
    # for a year when their names carry a content hash (docs/operations.md).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "config.urls"
WSGI_APPLICATION = "config.wsgi.application"
ASGI_APPLICATION = "config.asgi.application"

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
                "harness_app.roles.roles_context",
            ],
        },
    },
]

DATABASE_URL = env_str("DATABASE_URL", f"sqlite:///{DATA_DIR / 'harness.sqlite3'}")
DATABASES = {"default": parse_database_url(DATABASE_URL).as_django()}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, not :memory:, so a real Celery worker process started by a test sees the
    # same test database as the test itself.
    DATABASES["default"]["TEST"] = {"NAME": str(DATA_DIR / "test.sqlite3")}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "dashboard"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = env_path("STATIC_ROOT", DATA_DIR / "staticfiles")
STATIC_ROOT.mkdir(parents=True, exist_ok=True)  # WhiteNoise serves from it (warns if missing)
STATICFILES_DIRS = [BASE_DIR / "static"]
STATICFILES_FINDERS = [
    "django.contrib.staticfiles.finders.FileSystemFinder",
    "django.contrib.staticfiles.finders.AppDirectoriesFinder",
    # plotly.js comes from the installed plotly wheel, so no copy lives in the repository.
    "harness_app.staticfinders.PlotlyFinder",
]
# The manifest storage names each file by its content hash and keeps gzip copies beside it,
# so browsers may cache it forever; it needs `collectstatic` first (the image runs it at
# build time), so development and the tests serve the plain files straight from the finders.
STATIC_MANIFEST = env_bool("STATIC_MANIFEST", PRODUCTION)
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedManifestStaticFilesStorage"
        if STATIC_MANIFEST
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}

SECURE_CONTENT_TYPE_NOSNIFF = True
X_FRAME_OPTIONS = "DENY"

# The API (docs/api.md): token first, so a request without credentials gets 401 with a
# WWW-Authenticate header; the session lets a logged-in browser use the docs page.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # DRF's tokens, with a lifetime; a password change revokes them (harness_app/tokens.py).
        "harness_app.tokens.ExpiringTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": env_str("API_THROTTLE_ANON", "60/minute"),
        "user": env_str("API_THROTTLE_USER", "1200/minute"),
    },
    # DRF's parsers, JSON with a nesting limit (harness_app/json_body.py): a body nested
    # 50,000 deep is a 400 that says so, not a RecursionError.
    "DEFAULT_PARSER_CLASSES": [
        "harness_app.json_body.DepthLimitedJSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_PAGINATION_CLASS": "rest_framework.pagination.PageNumberPagination",
    "PAGE_SIZE": 50,
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}

# Celery: the embedded default is kombu's filesystem transport, so `make run` needs no
# broker server; production points CELERY_BROKER_URL at Redis.
BROKER_DIR = DATA_DIR / "broker"
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, object] = {}
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed", "control"):
        (BROKER_DIR / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(BROKER_DIR / "queue"),
        "data_folder_out": str(BROKER_DIR / "queue"),
        "processed_folder": str(BROKER_DIR / "processed"),
        "control_folder": str(BROKER_DIR / "control"),
        "store_processed": False,
    }
# Queues and task names are declared in harness_app/queues.py; services enqueue by name.
CELERY_TASK_ROUTES = queues.task_routes()
# Every declared queue, so that a worker started without --queues serves all of them
# (Celery's default would be the one queue named "celery"). The scripts still split the
# queues over two pools; see harness_app/queues.py.
CELERY_TASK_QUEUES = queues.kombu_queues()
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

# Where `make llm` serves SmolLM2; vLLM's own default, 8000, is the web server's port.
VLLM_BASE_URL = env_str("VLLM_BASE_URL", "http://127.0.0.1:8011/v1")
# Replicas of that server (docs/operations.md, "Several vLLM replicas"): calls are routed
# to the least busy, adapters are published to all. VLLM_BASE_URL is then the first.
VLLM_BASE_URLS = env_urls("VLLM_BASE_URLS", [VLLM_BASE_URL.rstrip("/")])
VLLM_BASE_URL = VLLM_BASE_URLS[0]
# How long a replica that failed a call is left out before it is probed again.
VLLM_REPLICA_COOLDOWN_S = env_float("VLLM_REPLICA_COOLDOWN_S", 10.0)
# The hosts a policy config's base URL may name (harness_app/policy_hosts.py); "*": any.
POLICY_ALLOWED_HOSTS = env_list(
    "POLICY_ALLOWED_HOSTS",
    sorted(
        {urlsplit(url).hostname or "127.0.0.1" for url in VLLM_BASE_URLS}
        | {"localhost", "127.0.0.1"}
    ),
)
# The key vLLM was started with (--api-key), sent as a bearer token to VLLM_BASE_URL only:
# a policy that names a server of its own never receives it.
VLLM_API_KEY = env_str("VLLM_API_KEY", "")
# A hosted OpenAI-compatible teacher (docs/rollouts.md, "Teacher batches"): its key is sent
# as a bearer token to TEACHER_BASE_URL only, and is never stored in the database or shown.
TEACHER_BASE_URL = env_str("TEACHER_BASE_URL", "")
TEACHER_API_KEY = env_str("TEACHER_API_KEY", "")
HEALTH_CHECK_TIMEOUT_S = env_int("HEALTH_CHECK_TIMEOUT_S", 2)
# The reader of the modular RAG protocol (docs/harness-results.md, "Answer accuracy"):
# when READER_BASE_URL is set, every rollout episode that completes is followed by one
# reader call on its curated set, and its answer_em / answer_f1 go into Episode.metrics.
# Empty: no reader. READER_MODEL empty: the first model the server lists. READER_API_KEY
# is sent to READER_BASE_URL only.
READER_BASE_URL = env_str("READER_BASE_URL", "")
READER_MODEL = env_str("READER_MODEL", "")
READER_API_KEY = env_str("READER_API_KEY", "")
READER_CONTEXT_CHARS = env_int("READER_CONTEXT_CHARS", 6000)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # Recording keys are in the proxy's URLs: every handler cuts them (config/logs.py).
    "filters": {"redact_keys": {"()": "config.logs.RedactSessionKeys"}},
    "formatters": {
        "django.server": {
            "()": "django.utils.log.ServerFormatter",
            "format": "[{server_time}] {message}",
            "style": "{",
        }
    },
    "handlers": {
        "console": {"class": "logging.StreamHandler", "filters": ["redact_keys"]},
        "django.server": {
            "class": "logging.StreamHandler",
            "formatter": "django.server",
            "filters": ["redact_keys"],
        },
    },
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {
        # httpx logs every request at INFO: one line per model call and per proxied call.
        "httpx": {"level": env_str("HTTPX_LOG_LEVEL", "WARNING")},
        # runserver's request lines, as Django logs them, through the filter above.
        "django.server": {"handlers": ["django.server"], "level": "INFO", "propagate": False},
    },
}
# Dense embeddings after each BM25 index build (harness_app/indexes.py): "auto" builds them
# when the dense extra is installed, "always" requires it, "never" skips them (dense and
# hybrid policies then embed the corpus in the first episode that needs it).
# Embedding a corpus costs minutes per 10,000 documents on a CPU, so by default it waits
# until a dense or hybrid policy first searches the corpus (docs/corpora.md).
DENSE_EMBEDDINGS = env_str("DENSE_EMBEDDINGS", "never")
if DENSE_EMBEDDINGS not in ("auto", "always", "never"):
    raise ImproperlyConfigured(f"DENSE_EMBEDDINGS={DENSE_EMBEDDINGS!r}: use auto, always or never")
# Exact dense KNN, or an HNSW graph (faiss, built beside the embeddings on first use):
# "exact", "hnsw", or "auto" (the graph above 200,000 documents). docs/retrieval.md.
DENSE_ANN = env_str("DENSE_ANN", "exact")
if DENSE_ANN not in ("exact", "hnsw", "auto"):
    raise ImproperlyConfigured(f"DENSE_ANN={DENSE_ANN!r}: use exact, hnsw or auto")
# BM25's unpruned ranking: "auto" (compiled with Numba when it imports), "numba" or "numpy".
# The harness reads the same variable (harness/retrieval/kernel.py); checked here at start.
BM25_KERNEL = env_str("BM25_KERNEL", "auto")
if BM25_KERNEL not in ("auto", "numba", "numpy"):
    raise ImproperlyConfigured(f"BM25_KERNEL={BM25_KERNEL!r}: use auto, numba or numpy")
EPISODE_STALE_AFTER_S = env_int("EPISODE_STALE_AFTER_S", 300)
VLLM_TIMEOUT_S = env_int("VLLM_TIMEOUT_S", 120)
VLLM_RETRIES = env_int("VLLM_RETRIES", 3)
# The recording proxy (docs/proxy.md). Its upstream comes from here only, never from a
# request, so a session key cannot turn the server into an open relay.
PROXY_UPSTREAM_URL = env_str("PROXY_UPSTREAM_URL", VLLM_BASE_URL).rstrip("/")
# Several upstreams: PROXY_UPSTREAM_URLS, else the vLLM replicas unless PROXY_UPSTREAM_URL
# names a server of its own. Calls go to the least busy; a stream stays on one.
PROXY_UPSTREAM_URLS = env_urls(
    "PROXY_UPSTREAM_URLS",
    VLLM_BASE_URLS if PROXY_UPSTREAM_URL in VLLM_BASE_URLS else [PROXY_UPSTREAM_URL],
)
PROXY_UPSTREAM_URL = PROXY_UPSTREAM_URLS[0]
PROXY_UPSTREAM_API_KEY = env_str("PROXY_UPSTREAM_API_KEY", VLLM_API_KEY)
PROXY_TIMEOUT_S = env_int("PROXY_TIMEOUT_S", 600)
# How long a proxy process trusts a session it found open, sparing each call the lookup; a
# session revoked or closed in another process still works here for up to this long.
PROXY_AUTH_CACHE_S = env_float("PROXY_AUTH_CACHE_S", 1.0)
# Per key and per web process (trajectories/proxy/limits.py); 0 means no limit. Over either,
# a call gets 429 with Retry-After in its own API's error shape.
PROXY_MAX_CONCURRENT_CALLS_PER_KEY = env_int("PROXY_MAX_CONCURRENT_CALLS_PER_KEY", 4)
PROXY_MAX_CALLS_PER_MINUTE_PER_KEY = env_int("PROXY_MAX_CALLS_PER_MINUTE_PER_KEY", 600)
PROXY_SESSION_TTL_S = env_int("PROXY_SESSION_TTL_S", 24 * 3600)
PROXY_SESSION_MAX_TTL_S = env_int("PROXY_SESSION_MAX_TTL_S", 30 * 24 * 3600)
# Where a harness run (trajectories/services/harness_runs.py) reaches the proxy: this
# server as seen from the Celery worker that launches the agent CLI.
PROXY_PUBLIC_URL = env_str("PROXY_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/")
EPISODE_SOFT_TIME_LIMIT_S = env_int("EPISODE_SOFT_TIME_LIMIT_S", 1800)
ANNOTATION_OVERLAP = env_int("ANNOTATION_OVERLAP", 1)  # distinct annotators per episode
ANNOTATION_LOCK_TTL_S = env_int("ANNOTATION_LOCK_TTL_S", 900)
# RL jobs: where the training worker runs the trainer, and the launch form's default for
# the local folder of the weights vLLM serves (make llm lays SmolLM2 out in .llm/).
RL_TRAIN_DEVICE = env_str("RL_TRAIN_DEVICE", "cpu")
if RL_TRAIN_DEVICE not in ("cpu", "cuda") and not RL_TRAIN_DEVICE.startswith("cuda:"):
    raise ImproperlyConfigured(f"RL_TRAIN_DEVICE={RL_TRAIN_DEVICE!r}: use cpu, cuda or cuda:N")
RL_BASE_MODEL_DIR = env_str("RL_BASE_MODEL_DIR", str(BASE_DIR / ".llm" / "smollm2-135m-instruct"))
RL_POLL_S = float(env_int("RL_POLL_MS", 2000)) / 1000
# The largest LoRA rank the configured vLLM server loads (its --max-lora-rank):
# scripts/llm/serve.sh reads the same variable and starts the CPU server at 16. The SFT
# launch form's rank defaults to at most this, so the default adapter is not refused.
LLM_MAX_LORA_RANK = env_int("LLM_MAX_LORA_RANK", 16)
# SFT jobs train on the training worker's RL_TRAIN_DEVICE; a record without recorded token
# ids is rendered with the chat template the student's vLLM serves (scripts/llm/serve.sh).
SFT_CHAT_TEMPLATE_PATH = env_path(
    "SFT_CHAT_TEMPLATE_PATH", BASE_DIR / "scripts" / "llm" / "chat_template.jinja"
)


# The OpenAPI schema, for /api/schema/ and `manage.py spectacular` alike (issue 21.10).
# Every choice set gets a name of its own, so generated clients keep stable enum names and
# `spectacular --validate --fail-on-warn` passes (tests/api/test_schema.py runs it).
# Identical choice sets hash alike and share one name: exports and ablation matrices;
# SFT and RL jobs.
SPECTACULAR_SETTINGS = {
    "TITLE": "Harness workbench API",
    "DESCRIPTION": "Rollout batches, ablation matrices, episodes, annotations, SFT exports, "
    "SFT jobs, RL jobs, recording sessions and harness tasks. "
    "Authenticate with `Authorization: Token <key>` (POST /api/token/ gives the key).",
    "VERSION": "1",
    "COMPONENT_SPLIT_REQUEST": True,
    # Every operation's error answers (400/401/403/404/415/429), documented by one hook.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "config.openapi.add_error_responses",
    ],
    "ENUM_NAME_OVERRIDES": {
        "BatchStatusEnum": "trajectories.models.BatchStatus",
        "WorkStatusEnum": "training.models.ExportStatus",
        "JobStatusEnum": "training.models.RLJobStatus",
        "EpisodeStatusEnum": "trajectories.models.EpisodeStatus",
        "EpisodeKindEnum": "trajectories.models.EpisodeKind",
        "ImportStatusEnum": "harness_app.models.ImportStatus",
        "BenchmarkSourceEnum": "harness_app.models.BenchmarkSource",
        "PolicyKindEnum": "harness_app.models.PolicyKind",
        "ExportFormatEnum": "training.models.ExportFormat",
        "ReconstructionEnum": "training.models.Reconstruction",
        "RLStepStatusEnum": "training.models.RLStepStatus",
        "RLAlgorithmEnum": "training.models.RLAlgorithm",
        "HarnessGroupStatusEnum": "trajectories.models.HarnessGroupStatus",
        "HarnessRunStatusEnum": "trajectories.models.HarnessRunStatus",
        "EvaluationStatusEnum": "trajectories.models.EvaluationStatus",
        "RolloutRequestStatusEnum": "training.models.RolloutRequestStatus",
        "DeliveryStateEnum": "training.models.DeliveryState",
    },
}

# --- Login lockout, API token lifetime, production security (issue 21.6, 21.9) ---
# docs/operations.md, "Login lockout and tokens" and "Production settings".

# A cache that every process shares, when CACHE_URL names a Redis: the API's throttles,
# and then the login lockout's counts. Without it, each process keeps its own cache.
CACHE_URL = env_str("CACHE_URL", "")
if CACHE_URL:
    CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
    }

# Repeated failed logins, at /login/, /admin/ and POST /api/token/ alike, lock out the
# username and, separately, the address they came from, for AXES_COOLOFF_MINUTES. Counted
# in the shared Redis cache when there is one, else in the database (axes' own tables):
# never per process.
INSTALLED_APPS += ["axes", "csp"]
AUTHENTICATION_BACKENDS = [
    "axes.backends.AxesStandaloneBackend",
    "django.contrib.auth.backends.ModelBackend",
]
AXES_HANDLER = (
    "axes.handlers.cache.AxesCacheHandler"
    if CACHE_URL
    else "axes.handlers.database.AxesDatabaseHandler"
)
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_RESET_ON_SUCCESS = True
AXES_VERBOSE = False  # no start-up banner in every process
# Seconds an API token lives from its creation; 0: for ever (harness_app/tokens.py).
API_TOKEN_TTL_S = env_int("API_TOKEN_TTL_S", 30 * 24 * 3600)

# HTTPS: on by default in production, off in development so `make run` works over plain
# http on localhost. Behind a TLS proxy, set SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO
# (only if the proxy sets that header and strips it from clients).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", PRODUCTION)
# The health probe and the recording proxy are called over the private network by
# compose's healthcheck and by workers, in plain http.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^proxy/"]
_proxy_ssl_header = env_str("SECURE_PROXY_SSL_HEADER", "")
SECURE_PROXY_SSL_HEADER = (_proxy_ssl_header, "https") if _proxy_ssl_header else None
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600 if PRODUCTION else 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", PRODUCTION)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", PRODUCTION)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", PRODUCTION)
# Preloading is a promise to browser vendors an operator makes, not a default.
SILENCED_SYSTEM_CHECKS = [] if SECURE_HSTS_PRELOAD else ["security.W021"]

# Content-Security-Policy (django-csp): scripts only from this server's own static files
# (no page has an inline script); styles also inline, since plotly.js and htmx set style
# attributes at run time. CSP_REPORT_ONLY=1 reports without blocking.
MIDDLEWARE += ["csp.middleware.CSPMiddleware", "axes.middleware.AxesMiddleware"]
_csp = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:", "blob:"],
        "font-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}
if env_bool("CSP_REPORT_ONLY", False):
    CONTENT_SECURITY_POLICY_REPORT_ONLY = _csp
else:
    CONTENT_SECURITY_POLICY = _csp
