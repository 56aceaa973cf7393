"""The protocol core is sans-I/O: nothing under coordinator/protocol/ may import a network, framework,
process or thread module, nor the I/O layers of this project. Checked on the source, mechanically."""

import ast
from collections.abc import Callable
from pathlib import Path

import pytest

PROTOCOL_DIR = Path(__file__).resolve().parent.parent / "coordinator" / "protocol"
PROTOCOL_PACKAGE = "coordinator.protocol"

FORBIDDEN = (
    "redis",
    "django",
    "celery",
    "rest_framework",
    "consumers",
    "coordinator.store",
    "coordinator.api",
    "coordinator.tasks",
    "socket",
    "threading",
    "subprocess",
)


def is_forbidden(module: str) -> bool:
    return any(module == name or module.startswith(name + ".") for name in FORBIDDEN)


def module_name(path: Path, root: Path, package: str) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join([package, *parts])


def imported_modules(source: str, module: str, is_package: bool) -> list[str]:
    """Absolute names of everything `source` (the text of `module`) imports, relative imports resolved.

    `from x import y` yields both x and x.y, since y may be a submodule. Calls to
    importlib.import_module / __import__ with a literal name count too.
    """
    package_parts = module.split(".") if is_package else module.split(".")[:-1]
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base_parts = package_parts[: len(package_parts) - (node.level - 1)]
                base = ".".join([*base_parts, node.module] if node.module else base_parts)
            else:
                base = node.module or ""
            found.append(base)
            found.extend(f"{base}.{alias.name}" for alias in node.names if alias.name != "*")
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.append(first.value)
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"__import__", "import_module"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def violations(root: Path, package: str) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root, package)
        for imported in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            if is_forbidden(imported):
                found.append(f"{path.relative_to(root.parent.parent)}: imports {imported}")
    return found


def test_protocol_core_exists_and_has_python_files() -> None:
    assert PROTOCOL_DIR.is_dir(), f"{PROTOCOL_DIR} is missing"
    assert list(PROTOCOL_DIR.rglob("*.py")), f"no .py files under {PROTOCOL_DIR}: the scan would be vacuous"


def test_protocol_core_imports_no_io_or_framework_module() -> None:
    assert PROTOCOL_DIR.is_dir() and list(PROTOCOL_DIR.rglob("*.py"))
    assert violations(PROTOCOL_DIR, PROTOCOL_PACKAGE) == []


# The scanner itself, on synthetic sources: a broken scanner would make the test above pass vacuously.


@pytest.mark.parametrize(
    "source",
    [
        "import redis",
        "import redis.asyncio as r",
        "from django.db import models",
        "from celery import shared_task",
        "import rest_framework",
        "from consumers.runtime import Member",
        "from coordinator.store import Store",
        "from coordinator import store",
        "from coordinator import api",
        "from .. import tasks",
        "from ..store import Store",
        "from ..api.views import heartbeat",
        "import socket",
        "from threading import Thread",
        "import subprocess",
        "if TYPE_CHECKING:\n    import redis",
        "def f():\n    import django",
        "importlib.import_module('redis')",
        "__import__('socket')",
    ],
)
def test_scanner_flags_forbidden_import(source: str) -> None:
    imported = imported_modules(source, "coordinator.protocol.group", is_package=False)
    assert any(is_forbidden(name) for name in imported), imported


@pytest.mark.parametrize(
    "source",
    [
        "import dataclasses",
        "from enum import Enum",
        "import time",
        "from . import model",
        "from .model import Member",
        "from coordinator.protocol import errors",
        "import redistools",  # a prefix match is not an import of redis
        "from collections.abc import Mapping",
    ],
)
def test_scanner_allows_pure_imports(source: str) -> None:
    imported = imported_modules(source, "coordinator.protocol.group", is_package=False)
    assert not any(is_forbidden(name) for name in imported), imported


def test_scanner_resolves_relative_imports_from_a_package_init() -> None:
    imported = imported_modules("from .. import store", "coordinator.protocol", is_package=True)
    assert "coordinator.store" in imported


def test_scanner_reports_file_and_module(tmp_path: Path) -> None:
    package = tmp_path / "coordinator" / "protocol"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "bad.py").write_text("from ..store import RedisStore\n")
    assert violations(package, PROTOCOL_PACKAGE) == [
        "coordinator/protocol/bad.py: imports coordinator.store",
        "coordinator/protocol/bad.py: imports coordinator.store.RedisStore",
    ]


def test_importing_the_core_loads_no_framework_or_io_layer_transitively() -> None:
    """The AST scan sees direct imports only; a fresh interpreter also catches indirect ones (the core
    importing a sibling module that imports Django, say). The stdlib's own use of socket/threading is
    not the core's doing, so only the project and third-party layers are checked here."""
    import subprocess
    import sys

    program = (
        "import importlib, pkgutil, sys\n"
        f"import {PROTOCOL_PACKAGE} as core\n"
        "for info in pkgutil.walk_packages(core.__path__, core.__name__ + '.'):\n"
        "    importlib.import_module(info.name)\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program],
        cwd=PROTOCOL_DIR.parent.parent,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.split()
    layers = [name for name in FORBIDDEN if name not in {"socket", "threading", "subprocess"}]
    assert [m for m in loaded if any(m == n or m.startswith(n + ".") for n in layers)] == []


# ------------------------------------------------------------------ the Redis vocabulary and consumers
#
# rsc_redis/ (the key layout, the Redis clients, the shared Lua) is at the bottom: the coordinator and
# the members both import it, it imports neither, nor a framework. consumers/ (members, the data plane,
# producers) reaches the coordinator only through what is pure (coordinator.protocol) and rsc_redis:
# never the store, the API, the operations layer or the operator pages, which a member process must not
# load.

ROOT = PROTOCOL_DIR.parent.parent
VOCABULARY_FORBIDDEN = (
    "coordinator",
    "consumers",
    "admin_ui",
    "config",
    "django",
    "celery",
    "rest_framework",
)
CONSUMERS_FORBIDDEN = ("coordinator.store", "coordinator.api", "coordinator.operations", "admin_ui")
# consumers/ reaches no store: run_member's in-process coordinator (RSC_COORDINATOR_URL=inprocess) asks
# Django's app registry for the coordinator app's store (CoordinatorConfig.metadata_store), by label.
CONSUMERS_ALLOWED: set[tuple[str, str]] = set()


def everywhere(relative: str) -> bool:
    return True


def layer_violations(
    package: str,
    forbidden: tuple[str, ...],
    repository: Path = ROOT,
    scanned: Callable[[str], bool] = everywhere,
) -> list[str]:
    """``path: imports module`` for each import of a ``forbidden`` module by a file under ``package`` (a
    top-level directory of ``repository``) whose repository-relative path ``scanned`` accepts, but the
    pairs of :data:`ALLOWED`."""
    root = repository / package
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root, package)
        relative = path.relative_to(repository).as_posix()
        if not scanned(relative):
            continue
        for imported in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            hit = any(imported == name or imported.startswith(name + ".") for name in forbidden)
            if hit and (relative, imported) not in ALLOWED:
                found.append(f"{relative}: imports {imported}")
    return found


def test_the_redis_vocabulary_imports_no_layer_above_it() -> None:
    assert list((ROOT / "rsc_redis").glob("*.py"))
    assert layer_violations("rsc_redis", VOCABULARY_FORBIDDEN) == []


def test_consumers_import_neither_the_store_nor_the_api_operations_or_operator_pages() -> None:
    assert list((ROOT / "consumers").rglob("*.py"))
    assert layer_violations("consumers", CONSUMERS_FORBIDDEN) == []


@pytest.mark.parametrize(
    ("package", "forbidden", "source"),
    [
        ("rsc_redis", VOCABULARY_FORBIDDEN, "from coordinator.protocol.model import Shard"),
        ("rsc_redis", VOCABULARY_FORBIDDEN, "import consumers.errors"),
        ("rsc_redis", VOCABULARY_FORBIDDEN, "from django.conf import settings"),
        ("consumers", CONSUMERS_FORBIDDEN, "from coordinator.store import codec"),
        ("consumers", CONSUMERS_FORBIDDEN, "from coordinator.store.clients import client_from_url"),
        ("consumers", CONSUMERS_FORBIDDEN, "from coordinator import operations"),
        ("consumers", CONSUMERS_FORBIDDEN, "from coordinator.api.errors import ApiError"),
        ("consumers", CONSUMERS_FORBIDDEN, "from admin_ui import audit"),
        ("consumers", CONSUMERS_FORBIDDEN, "def f():\n    from coordinator.store import get_store"),
    ],
)
def test_the_layer_scan_flags_an_upward_import(
    tmp_path: Path, package: str, forbidden: tuple[str, ...], source: str
) -> None:
    (tmp_path / package).mkdir()
    (tmp_path / package / "bad.py").write_text(source + "\n")
    assert layer_violations(package, forbidden, tmp_path) != []


def test_not_even_run_member_may_import_the_store(tmp_path: Path) -> None:
    commands = tmp_path / "consumers" / "management" / "commands"
    commands.mkdir(parents=True)
    (commands / "run_member.py").write_text("def f():\n    from coordinator.store import get_store\n")
    assert layer_violations("consumers", CONSUMERS_FORBIDDEN, tmp_path) == [
        "consumers/management/commands/run_member.py: imports coordinator.store",
        "consumers/management/commands/run_member.py: imports coordinator.store.get_store",
    ]


# ------------------------------------------------------------------ the coordinator below its callers
#
# Inside the coordinator the arrows point down too: coordinator/protocol (the core) <- coordinator/store
# <- coordinator/operations.py (authorizes and audits every operator action; the audit writer
# coordinator/audit.py, the credentials coordinator/credentials.py beside it) <- the callers: the HTTP
# API (coordinator/api/), the operator pages (admin_ui), the management commands and the tick. So no
# module under coordinator/ but coordinator/api/ imports the API or the operator pages (nor config/, the
# project, whose urls.py names the API: a detour through it would hide the arrow). The operations layer
# and the store speak no HTTP: their errors carry codes, which coordinator/api/errors.py maps to statuses.

COORDINATOR_FORBIDDEN = ("coordinator.api", "admin_ui", "config")
HTTP_FORBIDDEN = ("django.http", "rest_framework")
# Wiring that must name the layer above, each pair with the reason it stays.
COORDINATOR_ALLOWED = {
    # The plugin's URLconf, which host projects include as "coordinator.urls" (docs/plugin.md): it mounts
    # the API (include("coordinator.api.urls")) and the API's JSON 404 for the rest of /api/. It routes
    # and calls nothing; moving it into coordinator/api/ would change every host project's include.
    ("coordinator/urls.py", "coordinator.api"),
    ("coordinator/urls.py", "coordinator.api.errors"),
}
ALLOWED = CONSUMERS_ALLOWED | COORDINATOR_ALLOWED


def outside_the_api(relative: str) -> bool:
    return not relative.startswith("coordinator/api/")


def operations_or_store(relative: str) -> bool:
    return relative in {"coordinator/operations.py", "coordinator/audit.py"} or relative.startswith(
        "coordinator/store/"
    )


def test_the_coordinator_imports_neither_the_api_nor_the_operator_pages() -> None:
    """Module-level and function-local imports alike (the scan walks every node)."""
    assert list((ROOT / "coordinator" / "api").glob("*.py"))
    assert (ROOT / "coordinator" / "operations.py").is_file()
    assert layer_violations("coordinator", COORDINATOR_FORBIDDEN, scanned=outside_the_api) == []


def test_the_operations_layer_and_the_store_speak_no_http() -> None:
    assert list((ROOT / "coordinator" / "store").glob("*.py"))
    assert layer_violations("coordinator", HTTP_FORBIDDEN, scanned=operations_or_store) == []


def _scan_one(
    tmp_path: Path, path: str, source: str, forbidden: tuple[str, ...], scanned: Callable[[str], bool]
) -> list[str]:
    """The scan of a repository holding the one file coordinator/``path``."""
    bad = tmp_path / "coordinator" / path
    bad.parent.mkdir(parents=True, exist_ok=True)
    bad.write_text(source + "\n")
    return layer_violations("coordinator", forbidden, tmp_path, scanned)


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("metrics.py", "from coordinator.api.auth import Role, match_token"),
        ("metrics.py", "def scrape_refusal(request):\n    from coordinator.api.auth import match_token"),
        ("apps.py", "def ready(self):\n    from .api import auth"),
        ("admin.py", "from .api.auth import MANAGE_GROUPS_PERMISSION"),
        ("operations.py", "from coordinator.api.errors import HTTP_STATUS"),
        ("operations.py", "from admin_ui import audit"),
        ("audit.py", "from admin_ui.models import AuditEntry"),
        ("tasks.py", "import admin_ui.models"),
        ("management/commands/run_tick.py", "from ...api import views"),
        ("service.py", "from config.urls import urlpatterns"),
        ("urls.py", "from admin_ui.pages import groups"),
        ("urls.py", "from coordinator.api.views import HeartbeatView"),
        ("store/reading.py", "from .. import api"),
    ],
)
def test_the_coordinator_scan_flags_an_upward_import(tmp_path: Path, path: str, source: str) -> None:
    assert _scan_one(tmp_path, path, source, COORDINATOR_FORBIDDEN, outside_the_api) != []


@pytest.mark.parametrize(
    ("path", "source"),
    [
        ("operations.py", "from django.http import HttpRequest"),
        ("operations.py", "def f():\n    from rest_framework import status"),
        ("audit.py", "from django.http import Http404"),
        ("store/reading.py", "from rest_framework.exceptions import NotFound"),
        ("store/__init__.py", "import django.http"),
    ],
)
def test_the_http_scan_flags_http_in_the_operations_layer_or_the_store(
    tmp_path: Path, path: str, source: str
) -> None:
    assert _scan_one(tmp_path, path, source, HTTP_FORBIDDEN, operations_or_store) != []


def test_the_coordinator_scan_spares_the_api_and_the_exempt_wiring_alone(tmp_path: Path) -> None:
    coordinator = tmp_path / "coordinator"
    api = coordinator / "api"
    api.mkdir(parents=True)
    (api / "views.py").write_text("from admin_ui.lifecycle_views import actor_from_admin_request\n")
    (api / "door.py").write_text("from django.http import HttpResponse\n")
    (coordinator / "urls.py").write_text("from coordinator.api import errors as api_errors\n")
    (coordinator / "metrics.py").write_text("from django.http import HttpResponse\nfrom .api import errors\n")
    (coordinator / "operations.py").write_text("from django.db import DatabaseError\n")
    assert layer_violations("coordinator", COORDINATOR_FORBIDDEN, tmp_path, outside_the_api) == [
        "coordinator/metrics.py: imports coordinator.api",
        "coordinator/metrics.py: imports coordinator.api.errors",
    ]
    assert layer_violations("coordinator", HTTP_FORBIDDEN, tmp_path, operations_or_store) == []


def test_a_member_process_loads_no_part_of_the_store() -> None:
    """The scan sees direct imports; a fresh interpreter importing the data plane and the producer also
    catches indirect ones."""
    import subprocess
    import sys

    program = (
        "import sys\n"
        "import consumers.dataplane.plane, consumers.producer, consumers.runtime, consumers.listener\n"
        "import consumers.conf, consumers.member.ids\n"
        "print('\\n'.join(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", program], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    loaded = result.stdout.split()
    upward = [m for m in loaded if any(m == n or m.startswith(n + ".") for n in CONSUMERS_FORBIDDEN)]
    assert upward == []
    assert "rsc_redis.keys" in loaded
    # The members' settings table has the coordinator's form, not its table (coordinator/conf.py).
    assert "coordinator.protocol.setting" in loaded and "coordinator.conf" not in loaded


def test_consumers_reach_the_coordinator_only_through_its_pure_core() -> None:
    """Not only the store, the API, the operations layer: nothing of the coordinator but
    coordinator.protocol (the members' settings table, consumers/conf.py, has the form of
    coordinator/protocol/setting.py, not the coordinator's table)."""
    imports = layer_violations("consumers", ("coordinator",))
    assert imports
    assert [found for found in imports if not is_core(found.split(": imports ")[1])] == []


def is_core(module: str) -> bool:
    return module == PROTOCOL_PACKAGE or module.startswith(PROTOCOL_PACKAGE + ".")


# ------------------------------------------------------------------------- the store on the core alone
#
# coordinator/store/ knows of the coordinator only the core (coordinator/protocol) and itself, and of the
# rest of the repository only the Redis vocabulary (rsc_redis): not the operations layer, the audit trail,
# the credentials, the settings tables or the apps above (callers hand it what it needs, e.g. a settings
# object), so that it can be read, tested and benchmarked as the layer it is.
STORE_ROOT = ROOT / "coordinator" / "store"
STORE_MAY_IMPORT = ("coordinator.protocol", "coordinator.store")
STORE_FORBIDDEN_TOPS = ("consumers", "admin_ui", "config")


def store_violations(root: Path = STORE_ROOT) -> list[str]:
    found = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(path, root, "coordinator.store")
        for imported in imported_modules(path.read_text(), module, path.name == "__init__.py"):
            ours = imported.startswith("coordinator.") and not any(
                imported == name or imported.startswith(name + ".") for name in STORE_MAY_IMPORT
            )
            above = any(imported == top or imported.startswith(top + ".") for top in STORE_FORBIDDEN_TOPS)
            if ours or above:
                found.append(f"{path.relative_to(root).as_posix()}: imports {imported}")
    return found


def test_the_store_imports_of_the_coordinator_only_the_core() -> None:
    assert list(STORE_ROOT.glob("*.py"))
    assert store_violations() == []


@pytest.mark.parametrize(
    "source",
    [
        "from coordinator import operations",
        "from coordinator.conf import settings",
        "from ..audit import write",
        "def f():\n    from coordinator.credentials import Role",
        "import consumers.errors",
        "from config import settings",
    ],
)
def test_the_store_scan_flags_an_import_of_a_layer_above(tmp_path: Path, source: str) -> None:
    (tmp_path / "bad.py").write_text(source + "\n")
    assert store_violations(tmp_path) != []


def test_the_store_scan_allows_the_core_itself_and_the_vocabulary(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text(
        "from coordinator.protocol.model import Shard\nfrom . import codec\nfrom rsc_redis import keys\n"
    )
    assert store_violations(tmp_path) == []
