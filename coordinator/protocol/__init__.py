"""The coordination protocol as a pure, sans-I/O core.

No import of redis, django, celery or ``consumers`` here (``tests/test_layering.py`` enforces it); time
is passed in as ``now_ms``. ``docs/protocol.md`` is the specification this package implements.
"""
