"""Hypothesis profiles for the engine's property tests.

``admission`` (default) keeps the directory under a minute; set
``HYPOTHESIS_PROFILE=admission-stress`` for a long hunt before touching the engine.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "admission",
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "admission-stress",
    max_examples=2000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "admission"))
