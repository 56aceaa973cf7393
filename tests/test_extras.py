"""The optional extras (pyproject.toml, config/extras.py; docs/plugin.md section 1): this project's code
that needs one says in one line which extra to install. Here a module is made unimportable in a fresh
process (``sys.modules[name] = None``); tests/test_plugin.py runs the same commands in a venv that really
lacks the extras."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from config.extras import EXTRAS

REPO = Path(__file__).resolve().parent.parent

CASES = {
    "granian": ("from config.serve import main; main(['--bind', '127.0.0.1:1'])", {}),
    "psycopg": ("import config.settings", {"DATABASE_URL": "postgres://u:p@127.0.0.1:1/db"}),
}


def without(module: str, code: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("RSC_", "DATABASE_"))}
    base.update(DEBUG="true", DJANGO_SETTINGS_MODULE="config.settings", **env)
    script = f"import sys; sys.modules[{module!r}] = None\n{code}"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, env=base, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("module", sorted(CASES))
def test_a_missing_extra_is_one_line_naming_it(module: str) -> None:
    code, env = CASES[module]
    done = without(module, code, env)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    extra = EXTRAS[module]
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"pip install 'redis-stream-coordinator[{extra}]'" in lines[0] and module in lines[0]


def test_the_extras_install_the_modules_config_extras_names_and_dev_installs_them_all() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    for module, extra in EXTRAS.items():
        assert any(r.startswith(module) for r in extras[extra]), (module, extra)
        assert not any(r.startswith(module) for r in project["dependencies"]), module
    (itself,) = [r for r in extras["dev"] if r.startswith("redis-stream-coordinator[")]
    assert set(itself.split("[", 1)[1].rstrip("]").split(",")) == set(EXTRAS.values())
