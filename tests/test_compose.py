"""compose.yaml cannot be run here (no container engine), so its wiring is checked as data: the app
services use the PostgreSQL service, which has a healthcheck and a volume, and they wait for it."""

from __future__ import annotations

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
