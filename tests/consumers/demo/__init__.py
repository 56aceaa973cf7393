"""A Django app with a ``listeners`` module, installed only by ``tests.consumers.demo.settings``: what
``manage.py run_member`` discovers in the subprocess tests of tests/consumers/test_process.py."""
