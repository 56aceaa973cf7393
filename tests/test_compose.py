"""compose.yaml cannot be run here (no container engine), so its wiring is checked as data: the app
services use the PostgreSQL service, which has a healthcheck and a volume, and they wait for it."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

COMPOSE = Path(__file__).resolve().parents[1] / "compose.yaml"


def test_the_app_services_run_on_the_postgresql_service() -> None:
    services = yaml.safe_load(COMPOSE.read_text())["services"]
    postgres = services["postgres"]
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])
    assert any(v.endswith(":/var/lib/postgresql/data") for v in postgres["volumes"])
    env = postgres["environment"]
    for name in ("web", "worker", "beat"):
        service = services[name]
        url = service["environment"]["DATABASE_URL"]
        assert url == (
            f"postgres://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}@postgres:5432/{env['POSTGRES_DB']}"
        )
        assert service["depends_on"]["postgres"] == {"condition": "service_healthy"}


SERVICES = yaml.safe_load(COMPOSE.read_text())["services"]
LONG_RUNNING = ("postgres", "redis", "web", "worker", "beat", "member", "producer")


def test_every_long_running_service_has_a_healthcheck_and_init_runs_once() -> None:
    for name in LONG_RUNNING:
        assert SERVICES[name]["healthcheck"]["test"], name
    assert SERVICES["init"]["restart"] == "no" and "healthcheck" not in SERVICES["init"]
    for name in ("web", "worker", "beat"):
        assert SERVICES[name]["depends_on"]["init"] == {"condition": "service_completed_successfully"}
    assert SERVICES["member"]["depends_on"]["web"] == {"condition": "service_healthy"}
    # the member's healthcheck must not be able to pass trivially: it asks the coordinator
    assert "consumer_groups" in " ".join(SERVICES["member"]["healthcheck"]["test"])


def test_redis_persists_and_the_broker_has_its_own_database() -> None:
    redis = SERVICES["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    data_dir = command[command.index("--dir") + 1]
    assert any(v.endswith(f":{data_dir}") for v in redis["volumes"])
    env = SERVICES["web"]["environment"]
    assert env["REDIS_URL"].rsplit("/", 1)[0] == env["CELERY_BROKER_URL"].rsplit("/", 1)[0]
    assert env["REDIS_URL"].rsplit("/", 1)[1] != env["CELERY_BROKER_URL"].rsplit("/", 1)[1]


def test_tokens_are_set_and_members_present_one_of_them() -> None:
    env = SERVICES["web"]["environment"]
    assert env["RSC_ADMIN_TOKENS"] and env["RSC_MEMBER_TOKENS"]
    member = SERVICES["member"]["environment"]
    assert member["RSC_MEMBER_TOKEN"] in member["RSC_MEMBER_TOKENS"].split(",")
    assert member["RSC_COORDINATOR_URL"].split("//")[1].split(":")[0] in env["ALLOWED_HOSTS"].split(",")
    web_check = " ".join(SERVICES["web"]["healthcheck"]["test"])
    assert f"Bearer {env['RSC_ADMIN_TOKENS'].split(',')[0]}" in web_check


def test_the_commands_the_services_run_exist() -> None:
    from django.core.management import get_commands

    commands = get_commands()
    for name in ("init", "member", "producer"):
        argv = " ".join(SERVICES[name]["command"])
        for used in re.findall(r"manage\.py (\w+)", argv):
            assert used in commands or used == "produce_demo", (name, used)
    assert "consumer_groups" in commands and "run_member" in commands


def test_the_documented_commands_and_tokens_agree_with_the_services() -> None:
    """README.md and compose.yaml's own header: every `docker compose` line names services that exist,
    and every bearer token they show is one compose sets."""
    env = SERVICES["web"]["environment"]
    tokens = set(env["RSC_ADMIN_TOKENS"].split(",")) | set(env["RSC_MEMBER_TOKENS"].split(","))
    readme = (COMPOSE.parent / "README.md").read_text()
    texts = [COMPOSE.read_text(), readme]
    compose_lines = [line for text in texts for line in text.splitlines() if "docker compose" in line]
    assert compose_lines
    for line in compose_lines:
        for service in re.findall(r"docker compose (?:run --rm|exec) (\w+)", line):
            assert service in SERVICES, line
    for text in texts:  # compose.yaml's healthchecks and header; the README's curl lines
        for token in re.findall(r"Bearer ([\w-]+)", text):
            assert token in tokens, token


def test_the_api_runs_on_the_products_server_and_its_published_port() -> None:
    """compose's web service starts the API as every other setup does (config/serve.py: granian), with
    options config.serve accepts, bound where the published port points."""
    from config import serve

    command = SERVICES["web"]["command"]
    assert command[:3] == ["python", "-m", "config.serve"]
    options = serve.parse(command[3:])
    published = SERVICES["web"]["ports"][0].rsplit(":", 1)[1]
    assert options.bind == f"0.0.0.0:{published}"


def test_the_member_allows_its_plain_http_url_to_the_web_container_explicitly() -> None:
    """http://web:8000 is not this container's loopback: the member's check (consumers.E005) would stop
    it, so compose allows it, and says why."""
    from consumers.client import insecure_url_problem

    member = SERVICES["member"]["environment"]
    assert insecure_url_problem(member["RSC_COORDINATOR_URL"]) is not None
    assert member["RSC_ALLOW_INSECURE_COORDINATOR_URL"] == "true"
    text = COMPOSE.read_text()
    above = text[: text.index("RSC_ALLOW_INSECURE_COORDINATOR_URL")].splitlines()[-4:]
    assert any("in clear" in line for line in above)


def test_the_image_copies_every_package_and_installs_the_server_and_postgres_extras() -> None:
    """The apps need neither granian nor psycopg (pyproject.toml's extras); this image serves the API on
    granian (config/serve.py) against the PostgreSQL service."""
    dockerfile = yaml.safe_load(COMPOSE.read_text())["x-app"]["build"]["dockerfile_inline"]
    installs = re.findall(r"^RUN pip install .*$", dockerfile, re.M)
    assert installs == ["RUN pip install --no-cache-dir -c constraints.txt '.[server,postgres]'"]
    for package in ("coordinator", "consumers", "admin_ui", "rsc_redis", "config"):
        assert f"COPY {package} {package}" in dockerfile, package
