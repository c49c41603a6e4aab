"""The lease a period close holds while it writes statements (see billing.statements.periods).

A close takes the lease with a token, names its holder ("host/pid") and renews the
expiry at every step. Expiries are computed and compared by the database's clock, so a
web pod and a worker whose clocks differ agree on when a lease ran out.
"""

from __future__ import annotations

import os
import socket
from datetime import timedelta

from django.db.models import Q, QuerySet
from django.db.models.functions import Now
from django.utils.translation import gettext_lazy as _

from billing.conf import billing_setting
from billing.errors import PeriodBusy
from billing.models import BillingPeriod

State = BillingPeriod.State


def lease_held(period: BillingPeriod) -> bool:
    """Whether ``period``'s close lease is still running."""
    return BillingPeriod.objects.filter(pk=period.pk, close_lease_expires_at__gt=Now()).exists()


def lease_owner() -> str:
    """Who takes a lease, for the operator reading a 409: "host/pid"."""
    return f"{socket.gethostname()}/{os.getpid()}"[:200]


def lease_renew(period: BillingPeriod, token: str) -> None:
    """Renew the lease inside the current transaction; lost lease -> PeriodBusy.

    The conditional UPDATE locks the period row until commit, so a worker that took the
    lease over cannot write the same tenants at the same time. A lease that expired but
    was not taken over is simply renewed: the closer was slow, not dead.
    """
    lease = timedelta(seconds=float(billing_setting("CLOSE_LEASE_SECONDS")))
    renewed = BillingPeriod.objects.filter(
        pk=period.pk, state=State.CLOSING, close_token=token
    ).update(close_heartbeat_at=Now(), close_lease_expires_at=Now() + lease)
    if not renewed:
        raise PeriodBusy(
            _("Another worker took over closing %(period)s; stopping here."),
            params={"period": period.name},
        )


def lease_release(period: BillingPeriod, token: str) -> None:
    """Give a close that wrote nothing back: the period is open again."""
    BillingPeriod.objects.filter(pk=period.pk, state=State.CLOSING, close_token=token).update(
        state=State.OPEN,
        close_token="",
        close_owner="",
        close_heartbeat_at=None,
        close_lease_expires_at=None,
    )


def closes_abandoned() -> QuerySet[BillingPeriod]:
    """Periods left closing by a closer whose lease expired (it died or was killed)."""
    return BillingPeriod.objects.filter(state=State.CLOSING).filter(
        Q(close_lease_expires_at__isnull=True) | Q(close_lease_expires_at__lte=Now())
    )
