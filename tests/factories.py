"""factory_boy factories shared by every test module."""

from __future__ import annotations

from typing import Any

import factory
from django.contrib.auth import get_user_model

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
