"""Bindings must name a cluster Tidegate manages: the clusters these tests bind on."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def managed_clusters(request: pytest.FixtureRequest) -> None:
    if request.node.get_closest_marker("django_db") is None:
        return
    request.getfixturevalue("db")
    from tests.factories import ClusterFactory

    for name in ("gpu-east", "c1"):
        ClusterFactory(name=name)
