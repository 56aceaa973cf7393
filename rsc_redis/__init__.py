"""The Redis vocabulary at the bottom of the project: the key layout (:mod:`rsc_redis.keys`), the Redis
clients and script calls (:mod:`rsc_redis.clients`) and the Lua text the scripts share
(:mod:`rsc_redis.lua`).

Both the coordinator (``coordinator.store``, ``coordinator.api``) and the members and producers
(``consumers``) import it; it imports neither of them, nor Django or Celery (tests/test_layering.py), so
a member process loads no part of the store."""
