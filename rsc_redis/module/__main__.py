"""``python -m rsc_redis.module``: compile the gate module if needed and print its path."""

from rsc_redis.module import path

print(path())
