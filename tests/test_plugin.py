"""The package as a plugin of someone else's Django project (docs/plugin.md).

The end-to-end test builds the wheel, installs it with ``pip install -c constraints.txt`` into a FRESH
venv (no dev extras, no repository on sys.path), writes a minimal host project in a temporary directory
(its own settings, urls, wsgi, Celery app using ``coordinator.celery.beat_schedule()`` and a ``billing``
app with one ``@listener``), and then, with that venv's programs only: migrate, granian on a free port
against a private Redis, a group created through the API, the host's Celery worker with beat ticking,
``manage.py run_member`` of the host project, entries sent with the installed package's Producer and
handled by the host's listener. About a minute, mostly pip (from its cache); marked ``plugin``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from config.embedded_redis import RedisServer, _die_with_parent_hook, free_port
from consumers import conf as member_conf
from coordinator import conf
from coordinator.celery import beat_schedule
from coordinator.protocol.setting import Setting
from tests.polling import wait_until

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("coordinator", "consumers", "admin_ui", "rsc_redis")
MEMBER_TOKEN, ADMIN_TOKEN = "plugin-member-token-" + "m" * 24, "plugin-admin-token-" + "a" * 24
SECRET_KEY = "plugin-test-" + hashlib.sha256(b"not a real deployment").hexdigest()


# ------------------------------------------------------------------------------------ the host project

HOST_SETTINGS = '''
"""A host project's settings: only what docs/plugin.md asks for, plus the project's own app."""
import os
from pathlib import Path

from coordinator.celery import beat_schedule

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ["SECRET_KEY"]
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "axes",
    "coordinator",
    "consumers",
    "admin_ui",
    "billing",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "axes.middleware.AxesMiddleware",
]
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
ROOT_URLCONF = "hostproj.urls"
WSGI_APPLICATION = "hostproj.wsgi.application"
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "DIRS": [],
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": [
        "django.template.context_processors.request",
        "django.contrib.auth.context_processors.auth",
        "django.contrib.messages.context_processors.messages",
    ]},
}]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": BASE_DIR / "host.sqlite3"}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
STATIC_URL = "static/"
REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}
SPECTACULAR_SETTINGS = {
    "SWAGGER_UI_DIST": "SIDECAR", "SWAGGER_UI_FAVICON_HREF": "SIDECAR", "REDOC_DIST": "SIDECAR",
}

# The coordinator: only what differs from the defaults (docs/plugin.md lists them all).
REDIS_URL = os.environ["REDIS_URL"]
RSC_MEMBER_TOKENS = [os.environ["MEMBER_TOKEN"]]
RSC_ADMIN_TOKENS = [os.environ["ADMIN_TOKEN"]]
RSC_MEMBER_TOKEN = os.environ["MEMBER_TOKEN"]
RSC_COORDINATOR_URL = os.environ["COORDINATOR_URL"]
RSC_TICK_INTERVAL_MS = 500

CELERY_BROKER_URL = os.environ["BROKER_URL"]
CELERY_BEAT_SCHEDULE = {**beat_schedule(tick_interval_ms=RSC_TICK_INTERVAL_MS)}
'''

HOST_CELERY = """
import os

from celery import Celery

from coordinator.celery import connect_setting_checks

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
app = Celery("hostproj")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
connect_setting_checks()
"""

HOST_URLS = """
from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("", include("coordinator.urls")),
]
"""

HOST_WSGI = """
import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
application = get_wsgi_application()

from coordinator.api.door import HeartbeatDoor  # noqa: E402  (docs/plugin.md, section 3)

application = HeartbeatDoor(application)
"""

HOST_MANAGE = """
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "hostproj.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
"""

HOST_LISTENERS = """
import json
import os

from consumers import listener


@listener(stream_prefix="orders", consumer_group="billing", concurrency=2)
def bill(entry):
    with open(os.environ["HANDLED_LOG"], "a") as log:
        log.write(json.dumps({"key": entry.partition_key, "payload": entry.payload}) + "\\n")
"""

PRODUCE = """
import sys

import redis

from consumers.producer import Producer

producer = Producer(redis.Redis.from_url(sys.argv[1]))
for i in range(int(sys.argv[2])):
    producer.send("orders", f"customer-{i}", {"order": i})
"""


def write_host_project(root: Path) -> None:
    files = {
        "manage.py": HOST_MANAGE,
        "hostproj/__init__.py": "",
        "hostproj/settings.py": HOST_SETTINGS,
        "hostproj/celery.py": HOST_CELERY,
        "hostproj/urls.py": HOST_URLS,
        "hostproj/wsgi.py": HOST_WSGI,
        "billing/__init__.py": "",
        "billing/listeners.py": HOST_LISTENERS,
        "produce.py": PRODUCE,
    }
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text).lstrip())


# ------------------------------------------------------------------------------------ wheel and venv


def package_files() -> list[str]:
    """The files of the packages as the work tree has them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *PACKAGES],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    return sorted(name for name in listed if (REPO / name).is_file())


def build_wheel(out_dir: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the work tree (setuptools writes build/ and *.egg-info
    next to the sources: not in the repository other tests run from)."""
    source = out_dir / "source"
    for name in [*package_files(), "pyproject.toml", "README.md"]:
        (source / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, source / name)
    wheels = out_dir / "wheels"
    # Build isolation: pyproject.toml's [build-system] setuptools, from pip's cache after the first run.
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(wheels), str(source)])
    (wheel,) = wheels.glob("redis_stream_coordinator-*.whl")
    return wheel


def run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]
    if result.returncode != 0:
        raise AssertionError(
            f"{' '.join(map(str, argv))} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"
        )
    return result


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Path:
    """A new venv with the wheel installed against constraints.txt, as a host project would."""
    root = tmp_path_factory.mktemp("venv") / "venv"
    venv.create(root, with_pip=True, clear=True)
    python = root / "bin" / "python"
    constraints = str(REPO / "constraints.txt")
    run([str(python), "-m", "pip", "install", "-q", "-c", constraints, str(wheel)])
    return root


# ------------------------------------------------------------------------------------ processes


class Child:
    def __init__(self, name: str, argv: list[str], cwd: Path, env: dict[str, str], log_dir: Path) -> None:
        self.name, self.log_path = name, log_dir / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, preexec_fn=_die_with_parent_hook(),
            )  # fmt: skip

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive_output(self) -> str:
        assert self.process.poll() is None, f"{self.name} exited:\n{self.output()}"
        return self.output()

    def stop(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=20)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture
def children(tmp_path: Path) -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in reversed(started):
        child.stop()


def api_call(
    port: int, method: str, path: str, body: object = None, token: str = ADMIN_TOKEN
) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        conn.request(
            method, path, body=json.dumps(body).encode() if body is not None else None, headers=headers
        )
        response = conn.getresponse()
        return response.status, response.read()
    except OSError:
        return 0, b""
    finally:
        conn.close()


# ------------------------------------------------------------------------------------ tests


def test_the_wheel_holds_every_file_the_apps_need(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    # Every file of the packages that is not Python source: Lua scripts, templates, static files.
    data = [n for n in package_files() if not n.endswith((".py", ".pyc")) and "__pycache__" not in n]
    assert any(n.endswith(".lua") for n in data) and any(n.endswith(".html") for n in data)
    assert [n for n in data if n not in names] == []
    # Every module, migrations included.
    modules = [n for n in package_files() if n.endswith(".py")]
    assert any("/migrations/0001_initial.py" in n for n in modules)
    assert [n for n in modules if n not in names] == []
    # The project around the package is not part of it.
    assert not [n for n in names if n.startswith(("config/", "tests/", "bench/"))]


def test_the_wheel_depends_on_celery_with_its_redis_transport(wheel: Path) -> None:
    metadata = next(
        zipfile.ZipFile(wheel).read(n).decode()
        for n in zipfile.ZipFile(wheel).namelist()
        if n.endswith(".dist-info/METADATA")
    )
    requires = [
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    assert any(r.startswith("celery[redis]") for r in requires), requires
    # Compatible ranges, never exact pins: the package installs beside a host's own dependencies.
    assert not [r for r in requires if "==" in r.split(";")[0]], requires
    assert "Requires-Python: >=3.11" in metadata


@pytest.mark.plugin
def test_a_host_project_runs_a_member_of_the_installed_package(
    tmp_path: Path, fresh_venv: Path, children: list[Child]
) -> None:
    bin_dir = fresh_venv / "bin"
    host = tmp_path / "host"
    write_host_project(host)
    handled_log = tmp_path / "handled.jsonl"
    handled_log.touch()

    with RedisServer() as redis_server:
        web_port = free_port()
        env = {
            "PATH": f"{bin_dir}:{os.environ.get('PATH', '')}",
            "HOME": os.environ.get("HOME", str(tmp_path)),
            "DJANGO_SETTINGS_MODULE": "hostproj.settings",
            "PYTHONUNBUFFERED": "1",
            "SECRET_KEY": SECRET_KEY,
            "REDIS_URL": redis_server.url,
            "BROKER_URL": redis_server.url.rsplit("/", 1)[0] + "/1",
            "MEMBER_TOKEN": MEMBER_TOKEN,
            "ADMIN_TOKEN": ADMIN_TOKEN,
            "COORDINATOR_URL": f"http://127.0.0.1:{web_port}",
            "HANDLED_LOG": str(handled_log),
        }
        python = str(bin_dir / "python")

        # The installed package, not the repository's sources.
        where = run(
            [python, "-c", "import coordinator; print(coordinator.__file__)"], cwd=host, env=env
        ).stdout
        assert str(fresh_venv) in where and str(REPO) not in where

        run([python, "manage.py", "migrate", "--no-input"], cwd=host, env=env)
        listed = run([python, "manage.py", "run_member", "--list"], cwd=host, env=env).stdout
        assert "bill: orders/billing x2" in listed

        def start(name: str, argv: list[str]) -> Child:
            child = Child(name, argv, host, env, tmp_path)
            children.append(child)
            return child

        web = start(
            "granian",
            [str(bin_dir / "granian"), "--interface", "wsgi", "--host", "127.0.0.1", "--port", str(web_port),
             "--workers", "1", "hostproj.wsgi:application"],
        )  # fmt: skip
        wait_until(lambda: api_call(web_port, "GET", "/api/v1/admin/groups")[0], lambda s: s == 200,
                   timeout_s=30, what=f"the host's API answering ({web.alive_output()[-2000:]})")  # fmt: skip
        status, body = api_call(
            web_port,
            "POST",
            "/api/v1/admin/groups",
            {"stream_prefix": "orders", "consumer_group": "billing", "shard_count": 4, "max_concurrency": 2},
        )
        assert status == 201, body
        # The schema and docs pages work from the package's own static files and templates.
        assert api_call(web_port, "GET", "/api/v1/docs/")[0] == 200
        assert api_call(web_port, "GET", "/api/nothing-here")[0] == 404

        worker = start(
            "celery",
            [str(bin_dir / "celery"), "-A", "hostproj", "worker", "-B", "--pool=solo", "-l", "info",
             "-s", str(tmp_path / "beat-schedule"), "--without-gossip", "--without-mingle",
             "--without-heartbeat"],
        )  # fmt: skip
        members = start("members", [python, "manage.py", "run_member", "--shutdown-timeout", "5"])

        run([python, str(host / "produce.py"), redis_server.url, "20"], cwd=host, env=env)

        def handled() -> set[str]:
            members.alive_output()
            lines = handled_log.read_text().splitlines()
            return {json.loads(line)["key"] for line in lines}

        wait_until(
            handled,
            lambda keys: len(keys) == 20,
            timeout_s=60,
            what="the host's listener handling 20 entries",
        )
        # The host's Celery app found the coordinator's tasks and its beat sends the tick.
        wait_until(
            worker.alive_output,
            lambda out: re.search(r"coordinator\.tasks\.tick\[\S+\] succeeded", out) is not None,
            timeout_s=60,
            what="a tick run by the host's Celery worker",
        )
        status, body = api_call(web_port, "GET", "/api/v1/admin/groups/orders/billing")
        assert status == 200, body
        described = json.loads(body)
        live = [m for m in described["members"] if m["state"] not in ("LEFT", "EXPIRED")]
        assert len(live) == 2, described["members"]


# ------------------------------------------------------------------------------------ settings and docs

# Every package setting: the coordinator's table and the members' (coordinator/protocol/setting.py).
TABLES = (conf.TABLE, member_conf.TABLE)
DEFAULTS: dict[str, object] = {name: value for table in TABLES for name, value in table.defaults.items()}


def test_each_setting_is_in_one_table() -> None:
    assert len(DEFAULTS) == sum(len(table.settings) for table in TABLES)


def _settings_defaults_of_config() -> dict[str, object]:
    """config/settings.py's values with no RSC_* / REDIS_URL in the environment (nor a .env: a subprocess
    run from a directory without one cannot help reading the repository's; the values are compared
    only where the environment could not have changed them)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSC_") and k != "REDIS_URL"}
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="true", PYTHONPATH=str(REPO))
    code = (
        "import json, sys, django; from django.conf import settings; "
        "print(json.dumps({n: getattr(settings, n) for n in sys.argv[1:]}, default=str))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *DEFAULTS], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)  # type: ignore[no-any-return]


def test_config_settings_and_the_package_defaults_agree() -> None:
    dotenv = REPO / ".env"
    overridden = (
        set(re.findall(r"^\s*(RSC_\w+|REDIS_URL)\s*=", dotenv.read_text(), re.M))
        if dotenv.exists()
        else set()
    )
    values = _settings_defaults_of_config()
    differ = {
        name: (values[name], DEFAULTS[name])
        for name in DEFAULTS
        if name not in overridden and values[name] != DEFAULTS[name]
    }
    assert differ == {}


# The environment variable of each setting: its name, but RSC_RUNTIME's (config/settings.py).
ENVIRONMENT_NAMES = {name: name for name in DEFAULTS} | {"RSC_RUNTIME": "RSC_RUNTIME_MAX_CONCURRENCY"}


def _changed(setting: Setting) -> tuple[str, object]:
    """An environment value for ``setting`` other than its default, and the value it must read as."""
    if setting.name == "RSC_RUNTIME":
        return "3", {"max_concurrency": 3}
    if setting.name == "RSC_ADMIN_API_RATE":
        return "7/min", "7/min"
    if setting.type is bool:
        return str(not setting.default).lower(), not setting.default
    if setting.type in (int, float):
        value = setting.type(setting.default) + 1
        return str(value), value
    if setting.type is list:
        return "a,b", ["a", "b"]
    if setting.type is dict:
        return "a=1", {"a": "1"}
    return f"x-{setting.name}", f"x-{setting.name}"


def test_config_settings_reads_every_setting_from_its_environment_variable_with_the_tables_type() -> None:
    settings = [s for table in TABLES for s in table.settings]
    changed = {s.name: _changed(s) for s in settings}
    env = {k: v for k, v in os.environ.items() if not k.startswith("RSC_") and k != "REDIS_URL"}
    env.update({ENVIRONMENT_NAMES[name]: text for name, (text, _) in changed.items()})
    env.update(DJANGO_SETTINGS_MODULE="config.settings", DEBUG="true", PYTHONPATH=str(REPO))
    code = (
        "import json, sys, django; from django.conf import settings; "
        "print(json.dumps({n: getattr(settings, n) for n in sys.argv[1:]}))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, *changed], cwd=REPO, env=env, capture_output=True, text=True, check=True
    )
    values = json.loads(out.stdout)
    assert {name: values[name] for name in changed} == {name: value for name, (_, value) in changed.items()}
    for setting in settings:
        assert type(values[setting.name]) is setting.type, setting.name


def test_env_example_names_every_setting_and_the_tables_ranges() -> None:
    """.env.example shows every setting's variable (commented out); a range it states ("low..high", in
    the comment just above the variable) is the table's."""
    lines = (REPO / ".env.example").read_text().splitlines()
    shown = {m.group(1): i for i, line in enumerate(lines) if (m := re.match(r"# (\w+)=", line))}
    assert sorted(v for v in ENVIRONMENT_NAMES.values() if v not in shown) == []
    stated = 0
    for setting in (s for table in TABLES for s in table.settings):
        above = []
        for line in reversed(lines[: shown[ENVIRONMENT_NAMES[setting.name]]]):
            if not line.startswith("# ") or re.match(r"# \w+=", line):
                break
            above.append(line)
        for low, high in re.findall(r"\b(\d+)\.\.(\d+)\b", " ".join(above)):
            assert (int(low), int(high)) == (setting.low, setting.high), setting.name
            stated += 1
    assert stated >= 8


def markdown_rows() -> list[str]:
    """docs/plugin.md's settings table as the tables have it: name, default, help (section 4)."""
    rows = []
    for setting in (s for table in TABLES for s in table.settings):
        what = ("**Required.** " if setting.default is None else "") + setting.help.replace("|", "\\|")
        rows.append(f"| `{setting.name}` | `{_literal(setting.default)}` | {what} |")
    return rows


def _literal(value: object) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)}: {_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)


def test_docs_plugin_md_has_the_tables_settings_defaults_and_help() -> None:
    """The help text is written once, in the tables: docs/plugin.md's table must be their rendering
    (on a difference, the expected rows are in the message, to paste)."""
    text = (REPO / "docs" / "plugin.md").read_text()
    written = [line for line in text.splitlines() if re.match(r"\|\s*`(REDIS_URL|RSC_\w+)`\s*\|", line)]
    expected = markdown_rows()
    assert written == expected, "docs/plugin.md section 4 should read:\n" + "\n".join(expected)


def test_every_setting_the_package_reads_has_a_default_in_a_table() -> None:
    """A host project defines only what it changes: an RSC_* setting read anywhere in the packages
    without an entry in a table would be an AttributeError there. And no call site has a default of its
    own (``getattr(settings, "RSC_...", default)``): code reads ``conf.settings()``."""
    read: set[str] = set()
    own_defaults: list[str] = []
    for name in package_files():
        if name.endswith(".py") and not name.endswith("/conf.py"):
            text = (REPO / name).read_text()
            read |= set(re.findall(r"\.(RSC_[A-Z0-9_]+)\b", text))
            read |= set(re.findall(r"getattr\(\s*\w+,\s*\"(RSC_[A-Z0-9_]+)\"", text))
            own_defaults += [
                f"{name}: {m}" for m in re.findall(r"getattr\(\s*\w*settings,\s*\"RSC_\w+\",[^)]*\)", text)
            ]
    assert read and sorted(read - set(DEFAULTS)) == []
    assert own_defaults == []


def test_apply_defaults_fills_only_missing_settings() -> None:
    class Settings:
        RSC_TICK_INTERVAL_MS = 250

    target = Settings()
    added = conf.apply_defaults(target)
    assert "RSC_TICK_INTERVAL_MS" not in added and target.RSC_TICK_INTERVAL_MS == 250
    assert target.RSC_MEMBER_LEASE_TTL_MS == 10000  # type: ignore[attr-defined]
    target.RSC_MEMBER_TOKENS.append("x")  # type: ignore[attr-defined]
    assert conf.DEFAULTS["RSC_MEMBER_TOKENS"] == []  # a copy, not the default itself
    assert member_conf.apply_defaults(target) == list(member_conf.DEFAULTS)
    target.RSC_RUNTIME["max_concurrency"] = 8  # type: ignore[attr-defined]
    assert member_conf.DEFAULTS["RSC_RUNTIME"] == {"max_concurrency": 1}
    assert conf.apply_defaults(target) == [] and member_conf.apply_defaults(target) == []


def test_beat_schedule_has_the_tick_and_retention_entries_expiring_at_the_next_beat() -> None:
    assert beat_schedule(tick_interval_ms=500, retention_interval_ms=60_000) == {
        "coordinator-tick": {"task": "coordinator.tasks.tick", "schedule": 0.5, "options": {"expires": 0.5}},
        "coordinator-retention": {
            "task": "coordinator.tasks.retention",
            "schedule": 60.0,
            "options": {"expires": 60.0},
        },
    }


def test_beat_schedule_reads_the_django_settings_when_they_are_loaded(settings: object) -> None:
    settings.RSC_TICK_INTERVAL_MS = 700  # type: ignore[attr-defined]
    assert beat_schedule()["coordinator-tick"]["schedule"] == 0.7


def test_the_settings_object_is_built_once_and_follows_every_change(settings: Any) -> None:
    """conf.settings() is cached (the heartbeat path reads it) and built again when the settings change:
    through the fixture (override_settings and setting_changed), and through the fixture's ``del``,
    which sends no setting_changed but puts another settings object in Django's place."""
    first = conf.settings()
    assert conf.settings() is first
    settings.RSC_HEARTBEAT_BURST = 7
    assert conf.settings().RSC_HEARTBEAT_BURST == 7
    settings.RSC_AUDIT_RETENTION_DAYS = 3
    assert conf.settings().RSC_AUDIT_RETENTION_DAYS == 3
    del settings.RSC_AUDIT_RETENTION_DAYS
    absent = conf.settings().RSC_AUDIT_RETENTION_DAYS
    assert absent == conf.default("RSC_AUDIT_RETENTION_DAYS")
    with override_settings(RSC_AUDIT_RETENTION_DAYS=9):
        assert conf.settings().RSC_AUDIT_RETENTION_DAYS == 9
    restored = conf.settings().RSC_AUDIT_RETENTION_DAYS
    assert restored == absent
    with pytest.raises(dataclasses.FrozenInstanceError):
        conf.settings().RSC_HEARTBEAT_BURST = 1


def test_the_member_settings_are_read_at_each_call(settings: Any) -> None:
    settings.RSC_MEMBER_ID_PREFIX = "billing-"
    assert member_conf.settings().RSC_MEMBER_ID_PREFIX == "billing-"
    del settings.RSC_MEMBER_ID_PREFIX
    assert member_conf.settings().RSC_MEMBER_ID_PREFIX == ""
