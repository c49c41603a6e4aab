from django.apps import AppConfig


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants and access"

    def ready(self) -> None:
        from django.db.models.signals import post_save

        from tenants.history import track_tenant
        from tenants.models import Tenant

        post_save.connect(track_tenant, sender=Tenant, dispatch_uid="tenant-history")
