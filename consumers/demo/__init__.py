"""The demo that `make run` shows: a listener on the demo group and a producer feeding it.

Installed only when ``RSC_DEMO`` is true (the dev stack sets it), so ``run_member`` in a real deployment
never picks the demo listener up.
"""
