"""Pytest fixtures for the real control plane.

Import them into a ``conftest.py``::

    from tests.kube_real.fixtures import control_plane, real_cluster  # noqa: F401

and mark the tests ``pytest.mark.xdist_group(REAL_CLUSTER_GROUP)``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from toolchain.build import ToolchainError
from toolchain.control_plane import ControlPlane, ControlPlaneError

from .cluster import RealCluster
from .plane import shared_control_plane

REAL_CLUSTER_GROUP = "real-cluster"
real_cluster_group = pytest.mark.xdist_group(REAL_CLUSTER_GROUP)


@pytest.fixture(scope="session")
def control_plane() -> ControlPlane:
    """The run's control plane; a failure to build or start it fails the test, saying why."""
    try:
        return shared_control_plane()
    except (ControlPlaneError, ToolchainError) as error:
        pytest.fail(
            f"the real Kubernetes control plane could not be started: {error}\n"
            "Build it with `make toolchain` (or `python -m toolchain.build`); the logs of a "
            "component that failed are in the folder named above.",
            pytrace=False,
        )


@pytest.fixture
def real_cluster(control_plane: ControlPlane) -> Iterator[RealCluster]:
    """Administrator access to the control plane; what the test created in the namespaces
    it added, and the nodes it added, are removed afterwards."""
    cluster = RealCluster(control_plane)
    yield cluster
    cluster.remove_test_objects(sorted(cluster.touched_namespaces))
