"""The consumers package runs in plain Python processes: no Django needed. Its Lua scripts document
themselves (a header listing KEYS, ARGV, the return value and the keys touched)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DATAPLANE_DIR = ROOT / "consumers" / "dataplane"
# The data plane's Lua: the functions of its Redis Functions library (rsc_redis/dataplane/library.py).
LUA_DIR = ROOT / "rsc_redis" / "dataplane"


def test_the_data_plane_and_the_producer_import_without_django() -> None:
    code = (
        "import sys\n"
        "import consumers.dataplane, consumers.producer, consumers.errors\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        "assert not loaded, loaded\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    root = str(DATAPLANE_DIR.parents[1])
    env["PYTHONPATH"] = root
    done = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# Pieces of the library's prelude (rsc_redis/dataplane/library.py), not functions of their own.
PRELUDE = ("fence.lua", "produce_route.lua")


def test_the_data_planes_lua_is_where_the_library_reads_it() -> None:
    from rsc_redis.dataplane.library import FUNCTIONS

    found = {p.name for p in LUA_DIR.glob("*.lua")}
    assert found == {f"{name}.lua" for name in FUNCTIONS} | set(PRELUDE)


@pytest.mark.parametrize("path", sorted(LUA_DIR.glob("*.lua")), ids=lambda p: p.name)
def test_every_script_opens_with_its_protocol(path: Path) -> None:
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    text = "\n".join(header)
    if path.name in PRELUDE:
        assert "Returns" in text and "Touches" in text
    else:
        for word in ("KEYS[1]", "KEYS[2]", "ARGV[1]", "Returns", "Touches"):
            assert word in text, f"{path.name}: its header does not mention {word}"
