"""Celery tasks of the tenants app: thin, take ids, safe to run twice."""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.mail import send_mail
from django.utils import translation
from django.utils.translation import gettext as _

from tenants.languages import language_for
from tenants.models import Membership
from tenants.task_policy import background_task

logger = logging.getLogger(__name__)


@background_task(retry_for=(ConnectionError, TimeoutError))
def membership_notify(membership_id: int) -> int:
    """Email a user that they were given a role on a tenant. Returns mails sent (0 or 1).

    A membership deleted before the task runs, or a user without an address, sends nothing.
    """
    membership = (
        Membership.objects.select_related("user", "tenant").filter(pk=membership_id).first()
    )
    if membership is None or not membership.user.email:
        return 0
    with translation.override(language_for(membership.user)):
        subject, body = _membership_mail(membership)
    return send_mail(subject, body, settings.DEFAULT_FROM_EMAIL, [membership.user.email])


def _membership_mail(membership: Membership) -> tuple[str, str]:
    subject = _("Tidegate: you are now %(role)s of %(tenant)s") % {
        "role": membership.get_role_display(),
        "tenant": membership.tenant.name,
    }
    body = _(
        "Hello %(user)s,\n\nYou were given the role %(role)s on %(tenant)s (%(slug)s) and its "
        "sub-teams in Tidegate.\n"
    ) % {
        "user": membership.user.get_username(),
        "role": membership.get_role_display(),
        "tenant": membership.tenant.name,
        "slug": membership.tenant.slug,
    }
    return subject, body


@background_task()
def heartbeat() -> str:
    """Proves a worker and beat are alive (scheduled by beat; a line in the worker's log)."""
    logger.info("heartbeat")
    return "ok"


@background_task()
def outbox_relay() -> int:
    """Send the outbox messages the on-commit fast path could not (beat, every few
    seconds): work written while the broker was down, or lost by a broker restart."""
    from tenants.outbox import relay_due

    return relay_due()


@background_task()
def idempotency_keys_expire() -> int:
    """Forget Idempotency-Key answers past their retention (beat, hourly)."""
    from tenants.idempotency import forget_expired

    return forget_expired()


@background_task()
def api_tokens_expire() -> int:
    """Delete expired API tokens (beat, hourly)."""
    from tenants.tokens import tokens_forget_expired

    return tokens_forget_expired()
