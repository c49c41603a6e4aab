"""The what-if API (platform admins; everyone else gets 404):

- ``POST /api/v1/what-if/`` {cluster, days, kind, proposal} -> 202 with the run's id and URL
- ``GET /api/v1/what-if/`` the runs, newest first; ``GET /api/v1/what-if/<id>/`` status,
  progress and result
- ``POST /api/v1/what-if/<id>/rerun/`` -> 202, a new run with the same request
"""

from __future__ import annotations

from typing import Any

from django.http import Http404
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.reverse import reverse

from billing.models import WhatIfRun
from billing.whatif import services
from billing.whatif.records import DEFAULT_POLICY, Proposal, QuotaEntry
from scheduler_bridge.inventory.models import Cluster
from scheduler_bridge.replay.policies import POLICIES
from tenants.api.contract import KeepsContract
from tenants.api.serializers import (
    BoundedListSerializer,
    NoInput,
    RejectUnknownFields,
    at_most,
)

MAX_ENTRIES = 1000  # quotas or weights in one proposal


class QuotaEntryInput(RejectUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    tenant = serializers.CharField(max_length=63)
    flavour = serializers.CharField(max_length=120)
    guaranteed = serializers.IntegerField(min_value=0, max_value=1_000_000)


@extend_schema_field(
    {
        "type": "object",
        "maxProperties": MAX_ENTRIES,
        "additionalProperties": {"type": "number", "minimum": 0.001, "maximum": 999_999},
        "description": "A tenant's slug to its fair-share weight.",
    }
)
class WeightsField(serializers.DictField):  # type: ignore[type-arg]
    """Fair-share weights by tenant slug, at most MAX_ENTRIES of them."""


class ProposalInput(RejectUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    quotas: BoundedListSerializer = BoundedListSerializer(
        child=QuotaEntryInput(), required=False, max_length=MAX_ENTRIES
    )
    weights = WeightsField(
        child=serializers.FloatField(min_value=0.001, max_value=999_999), required=False
    )
    reclaim_min_run_s = serializers.FloatField(
        min_value=0, max_value=30 * 86_400, required=False, allow_null=True
    )
    policy = serializers.ChoiceField(choices=POLICIES, default=DEFAULT_POLICY)
    reclaim_wait_s = serializers.FloatField(
        min_value=0,
        max_value=services.MAX_RECLAIM_WAIT_S,
        required=False,
        allow_null=True,
        help_text="Seconds work inside its guarantee waits for GPUs to free before it "
        "preempts, for the proposed run (absent or null: today's setting).",
    )

    def validate_weights(self, value: dict[str, float]) -> dict[str, float]:
        return at_most(value, MAX_ENTRIES)  # type: ignore[no-any-return]

    def validate_quotas(self, value: list[dict[str, Any]]) -> list[dict[str, Any]]:
        seen: set[tuple[str, str]] = set()
        for entry in value:
            key = (entry["tenant"], entry["flavour"])
            if key in seen:
                raise serializers.ValidationError(
                    f"{key[0]} on {key[1]} is given twice; give each tenant and flavour once."
                )
            seen.add(key)
        return value


class WhatIfRunInput(RejectUnknownFields, serializers.Serializer):  # type: ignore[type-arg]
    cluster = serializers.SlugRelatedField(slug_field="name", queryset=Cluster.objects.all())
    days = serializers.IntegerField(min_value=1, max_value=services.MAX_DAYS, default=30)
    kind = serializers.ChoiceField(choices=WhatIfRun.Kind.choices, default=WhatIfRun.Kind.WHATIF)
    proposal = ProposalInput(required=False)

    def proposal_record(self) -> Proposal:
        data = self.validated_data.get("proposal") or {}
        return Proposal(
            quotas=tuple(
                QuotaEntry(q["tenant"], q["flavour"], q["guaranteed"])
                for q in data.get("quotas") or ()
            ),
            weights=dict(data.get("weights") or {}),
            reclaim_min_run_s=data.get("reclaim_min_run_s"),
            policy=data.get("policy") or DEFAULT_POLICY,
            reclaim_wait_s=data.get("reclaim_wait_s"),
        )


class WhatIfRunOutput(serializers.ModelSerializer):  # type: ignore[type-arg]
    url = serializers.SerializerMethodField()
    page = serializers.SerializerMethodField()
    cluster = serializers.SlugRelatedField[Cluster](slug_field="name", read_only=True)
    requested_by = serializers.SlugRelatedField[Any](
        slug_field="username", read_only=True, allow_null=True
    )

    class Meta:
        model = WhatIfRun
        fields = [
            "id",
            "url",
            "page",
            "kind",
            "cluster",
            "status",
            "progress",
            "message",
            "params",
            "result",
            "error",
            "attempts",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
        ]
        read_only_fields = fields

    def get_url(self, run: WhatIfRun) -> str:
        return reverse("what-if-detail", args=[run.pk], request=self.context.get("request"))

    def get_page(self, run: WhatIfRun) -> str:
        return reverse("billing-whatif-run", args=[run.pk], request=self.context.get("request"))


class WhatIfRunViewSet(
    KeepsContract,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    viewsets.GenericViewSet[WhatIfRun],
):
    """What-if and savings runs on a cluster's own history (docs/what-if.md)."""

    queryset = WhatIfRun.objects.none()  # the model, for the schema; rows: get_queryset
    serializer_class = WhatIfRunOutput
    filterset_fields = {"cluster__name": ["exact"], "kind": ["exact"], "status": ["exact"]}

    def initial(self, request: Request, *args: Any, **kwargs: Any) -> None:
        super().initial(request, *args, **kwargs)
        # tenant users do not learn that what-if runs exist (a method no route takes is
        # still a 405, as for everyone: the schema lists the routes)
        if self.action is not None and not services.can_run_what_if(request.user):
            raise Http404

    def get_queryset(self) -> Any:
        if getattr(self, "swagger_fake_view", False):  # schema generation: no user, no DB
            return self.queryset
        return services.whatif_runs_visible_to(self.request.user)

    @extend_schema(request=WhatIfRunInput, responses={202: WhatIfRunOutput})
    def create(self, request: Request) -> Response:
        """Queue a run; 202 with its id and URL. Bad input: 400 with field errors."""
        given = WhatIfRunInput(data=request.data)
        given.is_valid(raise_exception=True)
        run = services.whatif_run_create(
            actor=request.user,
            cluster=given.validated_data["cluster"],
            kind=given.validated_data["kind"],
            days=given.validated_data["days"],
            proposal=given.proposal_record(),
        )
        return self._accepted(request, run)

    @extend_schema(request=None, responses={202: WhatIfRunOutput})
    @action(detail=True, methods=["post"])
    def rerun(self, request: Request, pk: str | None = None) -> Response:
        """Queue a new run with this run's request (e.g. after its worker stopped)."""
        NoInput.check(request.data)
        run = services.whatif_run_repeat(actor=request.user, run=self.get_object())
        return self._accepted(request, run)

    def _accepted(self, request: Request, run: WhatIfRun) -> Response:
        data = WhatIfRunOutput(run, context={"request": request}).data
        return Response(data, status=status.HTTP_202_ACCEPTED, headers={"Location": data["url"]})
