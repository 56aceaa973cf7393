"""The e2e listener app: installed only by ``tests.e2e.settings``, discovered by ``manage.py run_member`` in
the member processes of tests/e2e/ and bench/e2e_bench.py."""
