"""factory_boy factories shared by every test module."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import factory
from django.contrib.auth import get_user_model
from django.utils import timezone

from scheduler_bridge.inventory.models import Cluster, Flavour, Node
from scheduler_bridge.quotas.models import Quota
from scheduler_bridge.workloads.models import PriorityClass, Workload
from tenants.models import Membership, NamespaceBinding, Role, Tenant


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    email = factory.LazyAttribute(lambda u: f"{u.username}@example.com")
    password = factory.django.Password("pw")


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda t: t.slug.replace("-", " ").title())
    parent = None

    @classmethod
    def _create(cls, model_class: Any, *args: Any, **kwargs: Any) -> Tenant:
        tenant: Tenant = super()._create(model_class, *args, **kwargs)
        parent = tenant.parent
        tenant.path = f"{parent.path if parent else '/'}{tenant.pk}/"
        tenant.depth = parent.depth + 1 if parent else 0
        tenant.save(update_fields=["path", "depth"])
        return tenant


class MembershipFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Membership

    user = factory.SubFactory(UserFactory)
    tenant = factory.SubFactory(TenantFactory)
    role = Role.MEMBER


class BindingFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = NamespaceBinding

    tenant = factory.SubFactory(TenantFactory)
    cluster_name = "gpu-east"
    namespace = factory.Sequence(lambda n: f"ns-{n}")


class ClusterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Cluster
        django_get_or_create = ("name",)

    name = "gpu-east"
    gateway = Cluster.Gateway.KUBERNETES


class NodeFactory(factory.django.DjangoModelFactory):
    """A node as an inventory sync stores it (whole H100s unless told otherwise)."""

    class Meta:
        model = Node

    cluster = factory.SubFactory(ClusterFactory)
    name = factory.Sequence(lambda n: f"node-{n}")
    product = "H100-80GB"
    gpu_count = 8
    labels = factory.LazyAttribute(
        lambda n: (
            {"nvidia.com/gpu.product": f"NVIDIA-{n.product}-HBM3"}
            if n.product.startswith("H100")
            else {"nvidia.com/gpu.product": f"NVIDIA-{n.product}"}
        )
    )


class FlavourFactory(factory.django.DjangoModelFactory):
    """A whole-GPU flavour; pass ``mig_profile`` (and the resource) for a MIG slice."""

    class Meta:
        model = Flavour
        django_get_or_create = ("cluster", "name")

    cluster = factory.SubFactory(ClusterFactory)
    name = "h100-80gb"
    product = "H100-80GB"
    resource_name = "nvidia.com/gpu"
    capacity = 8


class QuotaFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Quota

    tenant = factory.SubFactory(TenantFactory)
    flavour = factory.SubFactory(FlavourFactory)
    guaranteed = 0


class PriorityClassFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = PriorityClass
        django_get_or_create = ("name",)

    name = factory.Sequence(lambda n: f"priority-{n}")
    value = 0
    preemptible = True
    price_multiplier = Decimal("1")


class WorkloadFactory(factory.django.DjangoModelFactory):
    """Pending work of one pod set on the flavour; pass ``state`` and the admission
    fields (admitted_at, flavour, placements, gpus) for work that holds GPUs."""

    class Meta:
        model = Workload

    cluster = factory.SubFactory(ClusterFactory)
    tenant = factory.SubFactory(TenantFactory)
    name = factory.Sequence(lambda n: f"work-{n}")
    pod_sets = factory.LazyAttribute(
        lambda w: [{"name": "main", "count": 1, "gpus_per_pod": 2, "flavours": ["h100-80gb"]}]
    )
    submitted_at = factory.LazyFunction(timezone.now)


class FinishedWorkloadFactory(WorkloadFactory):
    """Work that ran and finished: ``submitted_at`` and ``waited`` (to its start) and
    ``ran`` (to its finish) give the times; ``gpus`` on ``flavour``."""

    class Meta:
        model = Workload

    class Params:
        waited = timedelta(0)
        ran = timedelta(hours=1)

    state = Workload.State.FINISHED
    flavour = factory.SubFactory(FlavourFactory)
    cluster = factory.LazyAttribute(lambda w: w.flavour.cluster)
    gpus = 1
    pod_sets = factory.LazyAttribute(
        lambda w: [
            {"name": "main", "count": 1, "gpus_per_pod": w.gpus, "flavours": [w.flavour.name]}
        ]
    )
    admitted_at = factory.LazyAttribute(lambda w: w.submitted_at + w.waited)
    started_at = factory.LazyAttribute(lambda w: w.submitted_at + w.waited)
    finished_at = factory.LazyAttribute(lambda w: w.submitted_at + w.waited + w.ran)
