"""Settings shared by the whole suite."""

from __future__ import annotations

from hypothesis import settings

# Hypothesis's default 200-ms deadline per example is a wall-clock bound: on this
# 2-core host under two pytest-xdist workers (and other load) it measured the host,
# not the code, and failed a model test once. Speed is measured in bench/, never
# asserted in tests; examples still run and shrink as before.
settings.register_profile("logbus", deadline=None)
settings.load_profile("logbus")
