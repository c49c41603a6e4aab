"""What a namespace binding may name: a namespace of a cluster Tidegate manages that no
system component owns."""

from __future__ import annotations

import pytest

from tenants.models import NamespaceBinding
from tests.conftest import Cast, client_for
from tests.factories import ClusterFactory

pytestmark = pytest.mark.django_db


def bind(cast: Cast, cluster: str, namespace: str):  # type: ignore[no-untyped-def]
    return client_for(cast.lead).post(
        "/api/v1/namespace-bindings/",
        {"tenant": "vision", "cluster_name": cluster, "namespace": namespace},
        format="json",
    )


@pytest.mark.parametrize(
    "namespace",
    ["kube-system", "kube-public", "kube-node-lease", "gpu-operator", "tidegate-system"],
)
def test_a_system_namespace_is_refused_with_422(cast: Cast, namespace: str) -> None:
    ClusterFactory(name="gpu-east")
    response = bind(cast, "gpu-east", namespace)
    assert response.status_code == 422
    assert "system namespace" in response.json()["namespace"][0]
    assert not NamespaceBinding.objects.filter(namespace=namespace).exists()


def test_the_clusters_own_mig_config_namespace_is_refused(cast: Cast) -> None:
    ClusterFactory(name="gpu-east", mig_config_namespace="nvidia-mig")
    response = bind(cast, "gpu-east", "nvidia-mig")
    assert response.status_code == 422
    assert "MIG configuration" in response.json()["namespace"][0]


def test_a_cluster_tidegate_does_not_manage_is_refused_naming_the_known_ones(
    cast: Cast,
) -> None:
    ClusterFactory(name="gpu-east")
    ClusterFactory(name="gpu-west")
    response = bind(cast, "gpu-north", "vision-train")
    assert response.status_code == 422
    assert response.json()["cluster_name"] == [
        "Cluster gpu-north does not exist; Tidegate manages: gpu-east, gpu-west."
    ]
    assert not NamespaceBinding.objects.exists()


def test_an_ordinary_namespace_binds(cast: Cast) -> None:
    ClusterFactory(name="gpu-east")
    assert bind(cast, "gpu-east", "vision-train").status_code == 201
