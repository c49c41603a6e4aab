"""Admin pins of a node's MIG layout: validated against the node's product."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from i18n.wording import gettext_noop, wording
from scheduler_bridge.inventory.catalogue import (
    UnknownGpuProduct,
    UnknownMigProfile,
    product_by_name,
    profile_by_name,
)
from scheduler_bridge.inventory.layouts import layout_to_json
from scheduler_bridge.inventory.models import Node
from scheduler_bridge.mig.layouts import IllegalMigLayout, MigLayout, layout_from_counts
from tenants import access
from tenants.audit import audit_record, snapshot
from tenants.errors import PermissionDenied, ValidationFailed


def parse_pin(node: Node, pin: Any) -> list[Any] | None:
    """`[null, ["3g.40gb", "3g.40gb"], ...]` (one entry per GPU) to stored layouts.

    Raises ValidationFailed naming the GPU and, for an unknown profile, the valid ones.
    """
    if pin is None:
        return None
    if not isinstance(pin, list) or len(pin) != node.gpu_count:
        raise ValidationFailed(
            f"Give one entry per GPU ({node.gpu_count} on {node.name}): null for a whole GPU "
            'or a list of MIG profiles, e.g. ["3g.40gb", "3g.40gb"].',
            field="pinned_layout",
        )
    try:
        product = product_by_name(node.product)
    except UnknownGpuProduct as error:
        raise ValidationFailed(
            f"{node.name} has no MIG-capable product ({node.product or 'unknown'}).",
            field="pinned_layout",
        ) from error
    stored: list[Any] = []
    for index, entry in enumerate(pin):
        if entry is None:
            stored.append(None)
            continue
        if not isinstance(entry, list) or not all(isinstance(p, str) for p in entry):
            raise ValidationFailed(
                f"GPU {index}: expected null or a list of profile names.", field="pinned_layout"
            )
        counts: dict[str, int] = {}
        try:
            for name in entry:
                profile = profile_by_name(product, name)
                counts[profile.name] = counts.get(profile.name, 0) + 1
            layout = layout_from_counts(product, counts) if counts else MigLayout.of()
        except (UnknownMigProfile, IllegalMigLayout) as error:
            raise ValidationFailed(f"GPU {index}: {error}", field="pinned_layout") from error
        stored.append(layout_to_json(layout))
    return stored


def node_pin(*, actor: Any, node: Node, pin: Any, source: str = "api") -> Node:
    """Pin (or with None unpin) a node's MIG layout; platform admins only."""
    if not access.is_platform_admin(actor):
        raise PermissionDenied("Only platform administrators pin MIG layouts.")
    stored = parse_pin(node, pin)
    with transaction.atomic():
        before = snapshot(node)
        node.pinned_layout = stored
        node.mig_failure_reported = False  # an admin looked at the node: plan it again
        node.save(update_fields=["pinned_layout", "mig_failure_reported"])
        audit_record(
            actor=actor,
            action="update",
            instance=node,
            before=before,
            after=snapshot(node),
            source=source,
            message=wording(gettext_noop("MIG layout pinned"))
            if stored is not None
            else wording(gettext_noop("MIG pin removed")),
        )
    return node
