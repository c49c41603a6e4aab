"""Rate cards, the billing policy, exchange rates and tenants' billing settings through
the API."""

from __future__ import annotations

from typing import Any

from django.core.validators import RegexValidator
from django.http import Http404
from django.utils.translation import gettext_lazy as _
from drf_spectacular.utils import (
    extend_schema,
    extend_schema_field,
    extend_schema_serializer,
)
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from billing import selectors
from billing.api.common import (
    MONTH,
    MONTH_MESSAGE,
    BillingTenantField,
    VisibleClusterField,
    VisibleFlavourField,
    require_billing_reader,
)
from billing.charging import exchange_rates, rates
from billing.models import (
    BillingPolicy,
    ExchangeRate,
    RateCard,
    TenantBillingSettings,
)
from billing.permissions import can_read_platform_rates
from tenants.api.contract import KeepsContract
from tenants.api.serializers import RejectUnknownFields, at_most

MAX_MULTIPLIERS = 100  # priority classes a rate card prices apart


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": MAX_MULTIPLIERS,
        "additionalProperties": {},
        "description": 'Price multiplier per priority class name, e.g. {"spot": "0.6"}.',
    }
)
class MultipliersField(serializers.JSONField):
    """Priority class name to price multiplier (a decimal as text)."""


class RateCardSerializer(RejectUnknownFields, serializers.ModelSerializer[RateCard]):
    cluster = VisibleClusterField(required=False, allow_null=True)
    flavour = VisibleFlavourField(required=False, allow_null=True)
    flavour_name = serializers.SerializerMethodField()
    priority_multipliers = MultipliersField(required=False)
    scope = serializers.CharField(source="scope_label", read_only=True)
    # Negative prices are the service's to refuse, with a message naming the field.
    reserved_price = serializers.DecimalField(max_digits=12, decimal_places=4)
    on_demand_price = serializers.DecimalField(max_digits=12, decimal_places=4)

    class Meta:
        model = RateCard
        fields = [
            "id",
            "name",
            "scope",
            "cluster",
            "flavour",
            "flavour_name",
            "product",
            "mig_profile",
            "currency",
            "reserved_price",
            "on_demand_price",
            "priority_multipliers",
            "valid_from",
            "valid_to",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "scope", "flavour_name", "created_at", "updated_at"]

    def validate_priority_multipliers(self, value: Any) -> Any:
        return at_most(value, MAX_MULTIPLIERS)

    @extend_schema_field({"type": "string", "nullable": True})
    def get_flavour_name(self, card: RateCard) -> str | None:
        """Also in a PATCH's answer (a read-only field with a default is left out of one)."""
        return card.flavour.name if card.flavour is not None else None


@extend_schema_serializer(many=False)  # one policy: GET /billing/policy/ is not a page
class BillingPolicySerializer(RejectUnknownFields, serializers.ModelSerializer[BillingPolicy]):
    class Meta:
        model = BillingPolicy
        fields = ["idle_mode", "allocation_idle", "default_currency", "updated_at"]
        read_only_fields = ["updated_at"]


MONTH_SHAPE = RegexValidator(MONTH, MONTH_MESSAGE)
CURRENCY_SHAPE = RegexValidator(
    r"^[A-Z]{3}$",
    _("Use a three-letter ISO 4217 currency code in capitals, e.g. 'USD' or 'EUR'."),
)


class ExchangeRateSerializer(RejectUnknownFields, serializers.ModelSerializer[ExchangeRate]):
    """An exchange rate for one month: 1 `from_currency` = `rate` `to_currency` in `month`.
    A rate that breaks the rules is refused with a 400 naming the field."""

    created_by = serializers.CharField(source="created_by.username", read_only=True, default="")

    class Meta:
        model = ExchangeRate
        fields = [
            "id",
            "month",
            "from_currency",
            "to_currency",
            "rate",
            "source",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = ["id", "created_by", "created_at", "updated_at"]
        validators: list[Any] = []  # the service reports a taken month and pair as a field error
        # the shapes only, so /api/schema/ states them; every rule is the service's
        extra_kwargs: dict[str, Any] = {
            "month": {"validators": [MONTH_SHAPE]},
            "from_currency": {"validators": [CURRENCY_SHAPE]},
            "to_currency": {"validators": [CURRENCY_SHAPE]},
        }


class TenantBillingSettingsSerializer(
    RejectUnknownFields, serializers.ModelSerializer[TenantBillingSettings]
):
    tenant = BillingTenantField()

    class Meta:
        model = TenantBillingSettings
        fields = ["tenant", "mode", "charge_reserved", "currency", "updated_at"]
        read_only_fields = ["updated_at"]
        validators: list[Any] = []


class RateCardViewSet(KeepsContract, viewsets.ModelViewSet[RateCard]):
    """Prices per GPU-hour. Everyone who reads money reads them; platform billing writes."""

    queryset = RateCard.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = RateCardSerializer
    filterset_fields = {"currency": ["exact"], "product": ["exact"], "cluster__name": ["exact"]}
    ordering_fields = ["valid_from", "name"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.rate_cards_visible_to(self.request.user)

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = rates.rate_card_create(
            actor=self.request.user, source="api", **serializer.validated_data
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = rates.rate_card_update(
            actor=self.request.user,
            card=serializer.instance,
            source="api",
            **serializer.validated_data,
        )

    def perform_destroy(self, instance: RateCard) -> None:
        rates.rate_card_delete(actor=self.request.user, card=instance, source="api")


class BillingPolicyViewSet(KeepsContract, viewsets.GenericViewSet[BillingPolicy]):
    """The platform-wide billing policy: GET reads it, POST changes it."""

    queryset = BillingPolicy.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = BillingPolicySerializer
    pagination_class = None  # one policy: no pages, filters or ordering
    filter_backends: list[Any] = []

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return BillingPolicy.objects.all()

    @extend_schema(responses=BillingPolicySerializer)
    def list(self, request: Request) -> Response:
        require_billing_reader(request)
        return Response(BillingPolicySerializer(BillingPolicy.current()).data)

    @extend_schema(responses={200: BillingPolicySerializer})
    def create(self, request: Request) -> Response:
        require_billing_reader(request)
        body = BillingPolicySerializer(BillingPolicy.current(), data=request.data, partial=True)
        body.is_valid(raise_exception=True)
        policy = rates.policy_update(actor=request.user, source="api", **body.validated_data)
        return Response(BillingPolicySerializer(policy).data)


class ExchangeRateViewSet(KeepsContract, viewsets.ModelViewSet[ExchangeRate]):
    """Exchange rates per month and currency pair: finance and platform billing read them,
    platform billing writes (everyone else: 404)."""

    queryset = ExchangeRate.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = ExchangeRateSerializer
    filterset_fields = {"month": ["exact"], "from_currency": ["exact"], "to_currency": ["exact"]}
    ordering_fields = ["month"]
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.exchange_rates_visible_to(self.request.user).select_related("created_by")

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        if not can_read_platform_rates(request.user):
            raise Http404
        return super().create(request, *args, **kwargs)

    def perform_create(self, serializer: Any) -> None:
        serializer.instance = exchange_rates.exchange_rate_create(
            actor=self.request.user, fields=serializer.validated_data, origin="api"
        )

    def perform_update(self, serializer: Any) -> None:
        serializer.instance = exchange_rates.exchange_rate_update(
            actor=self.request.user,
            exchange_rate=serializer.instance,
            changes=serializer.validated_data,
            origin="api",
        )

    def perform_destroy(self, instance: ExchangeRate) -> None:
        exchange_rates.exchange_rate_delete(
            actor=self.request.user, exchange_rate=instance, origin="api"
        )


class TenantBillingSettingsViewSet(
    KeepsContract,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet[TenantBillingSettings],
):
    """Chargeback or showback, and reserved charging, per tenant (inherited down the tree).
    POST sets a tenant's settings (creating or replacing them)."""

    queryset = TenantBillingSettings.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = TenantBillingSettingsSerializer
    lookup_field = "tenant__slug"
    lookup_url_kwarg = "tenant"

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return selectors.tenant_settings_visible_to(self.request.user)

    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        body = self.get_serializer(data=request.data)
        body.is_valid(raise_exception=True)
        row = rates.tenant_settings_set(
            actor=request.user,
            tenant=body.validated_data["tenant"],
            mode=body.validated_data.get("mode", TenantBillingSettings.Mode.CHARGEBACK),
            charge_reserved=body.validated_data.get("charge_reserved", False),
            currency=body.validated_data.get("currency", ""),
            source="api",
        )
        return Response(self.get_serializer(row).data, status=status.HTTP_201_CREATED)
