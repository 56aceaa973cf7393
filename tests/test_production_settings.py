"""Production settings (config/settings.py): the documented docs/production.env passes
`manage.py check --deploy` with 0 issues, and with DEBUG off the app refuses to start on a missing, default
or weak SECRET_KEY.

Each case runs in a subprocess with exactly the environment under test (not this process's, nor the
developer's): the settings are read once per process, and the test suite itself runs in development mode.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.checks.security import base as django_security
from django.core.management.utils import get_random_secret_key

from config import settings as project_settings

REPO = Path(__file__).resolve().parents[1]
PRODUCTION_ENV = REPO / "docs" / "production.env"
SECRETS_FROM_THE_STORE = ("SECRET_KEY", "DATABASE_URL", "REDIS_URL")


def production_env() -> dict[str, str]:
    """docs/production.env as a dict (KEY=value lines; comments and blank lines skipped)."""
    values = {}
    for line in PRODUCTION_ENV.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f"not KEY=value: {line!r}"
            values[name.strip()] = value
    return values


def with_secrets(env: dict[str, str], tmp_path: Path) -> dict[str, str]:
    """``env`` plus what a secret store would supply: a fresh key and throwaway database / Redis URLs."""
    return {
        **env,
        "SECRET_KEY": get_random_secret_key(),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'check.sqlite3'}",
        "REDIS_URL": "redis://127.0.0.1:1/0",  # never connected to: the checks do no I/O
    }


def run(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {"DEVSTACK_DIR": "", **env}  # not a `make run` running in this checkout (config/devstack_env.py)
    return subprocess.run(
        [sys.executable, *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def settings_in(env: dict[str, str], *names: str) -> dict[str, object]:
    code = f"import json, config.settings as s; print(json.dumps({{n: getattr(s, n) for n in {names!r}}}))"
    result = run(["-c", code], env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


# ----------------------------------------------------------------------------------- the documented file


def test_the_documented_production_env_passes_check_deploy_with_no_issue(tmp_path: Path) -> None:
    result = run(
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        with_secrets(production_env(), tmp_path),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues (0 silenced)." in result.stdout


def test_the_documented_file_leaves_every_secret_to_the_secret_store() -> None:
    env = production_env()
    assert env["SECRET_KEY"] == ""  # deployed as it is, the app refuses to start (below)
    assert not {"DATABASE_URL", "REDIS_URL", "RSC_MEMBER_TOKENS", "RSC_ADMIN_TOKENS"} & set(env)


def test_the_documented_file_unchanged_refuses_to_start() -> None:
    result = run(["manage.py", "check"], production_env())
    assert result.returncode != 0
    assert "SECRET_KEY is not set, and DEBUG is off: refusing to start" in result.stderr


def test_every_variable_of_the_production_env_is_described_in_env_example() -> None:
    example = (REPO / ".env.example").read_text()
    documented = set(re.findall(r"^#? ?([A-Z][A-Z0-9_]+)=", example, flags=re.MULTILINE))
    assert set(production_env()) <= documented


# ----------------------------------------------------------------------------------- refusing to start


@pytest.mark.parametrize(
    ("secret_key", "problem"),
    [
        (None, "is not set"),
        ("", "is not set"),
        (project_settings.DEV_SECRET_KEY, "is the development key"),
        ("django-insecure-" + get_random_secret_key(), "is the development key"),
        ("x" * 49 + "abcd", "is weak"),  # 53 characters, 5 distinct: long enough, see below
        (get_random_secret_key()[:49], "is weak"),
        ("abcd" * 20, "is weak"),  # 80 characters, 4 distinct
    ],
    ids=["missing", "empty", "dev-key", "insecure-prefix", "ok-control", "short", "few-distinct"],
)
def test_debug_off_with_a_bad_secret_key_refuses_to_start(secret_key: str | None, problem: str) -> None:
    env = {"DEBUG": "false", "ALLOWED_HOSTS": "coordinator.example.com"}
    if secret_key is not None:
        env["SECRET_KEY"] = secret_key
    result = run(["manage.py", "check"], env)
    if secret_key == "x" * 49 + "abcd":  # the control: exactly what Django accepts starts
        assert result.returncode == 0, result.stderr
        return
    assert result.returncode != 0
    # One line saying what to set (issue 31: it was a 40-line traceback).
    assert result.stderr.startswith("manage.py: SECRET_KEY " + problem), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert "DEBUG is off: refusing to start" in result.stderr


def test_the_api_server_refuses_a_missing_key_in_one_line_too() -> None:
    """``python -m config.serve`` checks the settings before it becomes granian, whose workers would
    each print a traceback."""
    result = run(["-m", "config.serve", "--workers", "1"], {"DEBUG": "false"})
    assert result.returncode != 0
    assert result.stderr.startswith("config.serve: SECRET_KEY is not set"), result.stderr
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_a_weak_fallback_key_refuses_to_start_too() -> None:
    env = {"DEBUG": "false", "SECRET_KEY": get_random_secret_key(), "SECRET_KEY_FALLBACKS": "old-and-short"}
    result = run(["-c", "import config.settings"], env)
    assert result.returncode != 0
    assert "SECRET_KEY_FALLBACKS[0] is weak" in result.stderr


def test_debug_on_without_a_key_starts_with_the_development_key() -> None:
    """`make run` (config/devstack.py sets DEBUG=true) needs no key."""
    assert settings_in({"DEBUG": "true"}, "SECRET_KEY") == {"SECRET_KEY": project_settings.DEV_SECRET_KEY}


def test_the_rule_is_djangos_own() -> None:
    """check --deploy (security.W009) and the start-up refusal must agree on what a weak key is."""
    assert project_settings.SECRET_KEY_MIN_LENGTH == django_security.SECRET_KEY_MIN_LENGTH
    assert (
        project_settings.SECRET_KEY_MIN_UNIQUE_CHARACTERS == django_security.SECRET_KEY_MIN_UNIQUE_CHARACTERS
    )
    assert project_settings.SECRET_KEY_INSECURE_PREFIX == django_security.SECRET_KEY_INSECURE_PREFIX
    for key in ("", project_settings.DEV_SECRET_KEY, "a" * 60, "abcde" * 10, get_random_secret_key()):
        assert (project_settings.secret_key_problem(key) is None) == django_security._check_secret_key(key)


# ----------------------------------------------------------------------------------- HTTPS defaults

HTTPS_SETTINGS = (
    "SECURE_SSL_REDIRECT",
    "SECURE_HSTS_SECONDS",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_CONTENT_TYPE_NOSNIFF",
    "X_FRAME_OPTIONS",
    "SECURE_REFERRER_POLICY",
    "SECURE_PROXY_SSL_HEADER",
)


def test_with_debug_off_the_https_defaults_are_on() -> None:
    assert settings_in({"DEBUG": "false", "SECRET_KEY": get_random_secret_key()}, *HTTPS_SETTINGS) == {
        "SECURE_SSL_REDIRECT": True,
        "SECURE_HSTS_SECONDS": 31_536_000,
        "SESSION_COOKIE_SECURE": True,
        "CSRF_COOKIE_SECURE": True,
        "SECURE_CONTENT_TYPE_NOSNIFF": True,
        "X_FRAME_OPTIONS": "DENY",
        "SECURE_REFERRER_POLICY": "same-origin",
        "SECURE_PROXY_SSL_HEADER": None,  # trusted only when the deployment says its proxy sets it
    }


def test_with_debug_on_plain_http_works() -> None:
    found = settings_in({"DEBUG": "true"}, *HTTPS_SETTINGS)
    assert not found["SECURE_SSL_REDIRECT"] and not found["SECURE_HSTS_SECONDS"]
    assert not found["SESSION_COOKIE_SECURE"] and not found["CSRF_COOKIE_SECURE"]


def test_the_environment_sets_every_one_of_them() -> None:
    env = {
        "DEBUG": "false",
        "SECRET_KEY": get_random_secret_key(),
        "SECURE_SSL_REDIRECT": "false",
        "SECURE_HSTS_SECONDS": "3600",
        "SESSION_COOKIE_SECURE": "false",
        "CSRF_COOKIE_SECURE": "false",
        "SECURE_CONTENT_TYPE_NOSNIFF": "false",
        "X_FRAME_OPTIONS": "SAMEORIGIN",
        "SECURE_REFERRER_POLICY": "no-referrer",
        "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
    }
    assert settings_in(env, *HTTPS_SETTINGS) == {
        "SECURE_SSL_REDIRECT": False,
        "SECURE_HSTS_SECONDS": 3600,
        "SESSION_COOKIE_SECURE": False,
        "CSRF_COOKIE_SECURE": False,
        "SECURE_CONTENT_TYPE_NOSNIFF": False,
        "X_FRAME_OPTIONS": "SAMEORIGIN",
        "SECURE_REFERRER_POLICY": "no-referrer",
        "SECURE_PROXY_SSL_HEADER": ["HTTP_X_FORWARDED_PROTO", "https"],  # a tuple, through JSON
    }


def test_a_secret_key_starting_with_a_dollar_sign_is_taken_as_it_is() -> None:
    """django-environ would read "$..." as a reference to another variable; the key must not be."""
    key = "$" + get_random_secret_key()
    env = {"DEBUG": "false", "SECRET_KEY": key}
    result = run(["-c", "import config.settings as s; print(s.SECRET_KEY)"], env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == key


def test_a_malformed_proxy_ssl_header_refuses_to_start() -> None:
    env = {"DEBUG": "false", "SECRET_KEY": get_random_secret_key(), "SECURE_PROXY_SSL_HEADER": "https"}
    result = run(["-c", "import config.settings"], env)
    assert result.returncode != 0
    assert "SECURE_PROXY_SSL_HEADER must be 'HEADER,value'" in result.stderr


# ----------------------------------------------------------------------------------- development mode


def test_importing_pytest_does_not_make_a_process_a_development_one() -> None:
    """Development mode (the public development key, no HTTPS) comes from DEVELOPMENT / DEBUG alone: a
    production process that happens to import pytest (a plugin, a health check) still refuses the
    missing key."""
    result = run(["-c", "import pytest, config.settings"], {"DEBUG": "false"})
    assert result.returncode != 0
    assert "SECRET_KEY is not set, and DEBUG is off: refusing to start" in result.stderr


def test_development_comes_from_its_variable_and_defaults_to_debug() -> None:
    names = ("DEVELOPMENT", "SECRET_KEY", "SECURE_SSL_REDIRECT")
    dev = {"DEVELOPMENT": True, "SECRET_KEY": project_settings.DEV_SECRET_KEY, "SECURE_SSL_REDIRECT": False}
    assert settings_in({"DEVELOPMENT": "true"}, *names) == dev
    assert settings_in({"DEBUG": "true"}, *names) == dev
    key = get_random_secret_key()
    production = {"DEVELOPMENT": False, "SECRET_KEY": key, "SECURE_SSL_REDIRECT": True}
    assert settings_in({"DEBUG": "true", "DEVELOPMENT": "false", "SECRET_KEY": key}, *names) == production
    result = run(["-c", "import config.settings"], {"DEBUG": "true", "DEVELOPMENT": "false"})
    assert "SECRET_KEY is not set" in result.stderr


def test_the_suite_runs_in_development_mode_and_its_children_do_not_inherit_it() -> None:
    import os

    from django.conf import settings

    assert settings.DEVELOPMENT is True
    assert "DEVELOPMENT" not in os.environ or os.environ["DEVELOPMENT"] != "true"
    assert os.environ["DJANGO_SETTINGS_MODULE"] == "config.settings"
