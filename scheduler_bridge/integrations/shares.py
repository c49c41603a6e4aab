"""What a pod template asks of a shared GPU, in the three ways clusters spell it (pure).

- **HAMi** (https://github.com/Project-HAMi/HAMi): ``nvidia.com/gpu`` counts GPUs, and
  per GPU ``nvidia.com/gpumem`` (MiB) or ``nvidia.com/gpumem-percentage`` (% of its
  memory) and ``nvidia.com/gpucores`` (% of its compute), in the container's resources.
  HAMi enforces both; without a memory request a pod gets the whole GPU's memory.
- **Fractions** (NVIDIA KAI Scheduler's GPU sharing, ``docs/gpu-sharing``): the pod
  template's annotation ``gpu-fraction`` ("0.5": half of one GPU) or ``gpu-memory``
  (MiB of one GPU), and no ``nvidia.com/gpu`` request at all; not enforced.
- **Time-slicing and MPS** (the NVIDIA device plugin's sharing): plain ``nvidia.com/gpu``
  replicas; what one replica holds depends on the flavour (services.units_per_pod).

``share_of`` returns None for a template that asks for none of this, and raises
``ShareError`` (a ValueError saying what to change) for values no GPU can give.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from i18n.wording import Wording, gettext_noop, wording

HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_MEMORY_PERCENT = "nvidia.com/gpumem-percentage"
HAMI_CORES = "nvidia.com/gpucores"
HAMI_RESOURCES = (HAMI_MEMORY, HAMI_MEMORY_PERCENT, HAMI_CORES)
FRACTION_ANNOTATION = "gpu-fraction"
MEMORY_ANNOTATION = "gpu-memory"
MILLI = 1000


class ShareError(ValueError):
    """A share no GPU can give; ``reason`` says which field and what to change, in words
    the portal says again in the reader's language."""

    def __init__(self, reason: Wording) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ShareRead:
    """One pod's share of one GPU: ``milli`` thousandths of its compute (None: not
    said), ``memory_mib`` of its memory (None: not said), ``memory_percent`` of its
    memory (HAMi), and the style it was asked in (``hami`` or ``fraction``)."""

    style: str
    milli: int | None = None
    memory_mib: int | None = None
    memory_percent: int | None = None

    @property
    def gpu_milli(self) -> int | None:
        """The compute share, or the memory percentage as thousandths (the larger)."""
        from_percent = None if self.memory_percent is None else self.memory_percent * 10
        found = [v for v in (self.milli, from_percent) if v is not None]
        return max(found) if found else None


def share_of(template: Mapping[str, Any]) -> ShareRead | None:
    """The share each pod of ``template`` asks for, or None (whole GPUs, or none)."""
    spec = template.get("spec") or {}
    annotations = (template.get("metadata") or {}).get("annotations") or {}
    hami = _hami_requests(spec)
    fraction = {
        k: annotations[k] for k in (FRACTION_ANNOTATION, MEMORY_ANNOTATION) if k in annotations
    }
    if hami and fraction:
        raise ShareError(
            wording(
                gettext_noop(
                    "asks for a GPU share twice: HAMi resources (%(resources)s) and "
                    "annotations (%(annotations)s); keep one way"
                ),
                resources=", ".join(sorted(hami)),
                annotations=", ".join(sorted(fraction)),
            )
        )
    if hami:
        return _hami(hami)
    if fraction:
        return _fraction(fraction)
    return None


def _hami(found: Mapping[str, int]) -> ShareRead:
    cores = found.get(HAMI_CORES)
    percent = found.get(HAMI_MEMORY_PERCENT)
    for name, value in ((HAMI_CORES, cores), (HAMI_MEMORY_PERCENT, percent)):
        if value is not None and not 1 <= value <= 100:
            raise ShareError(
                wording(
                    gettext_noop("%(name)s is a percentage of one GPU, 1..100; got %(value)s"),
                    name=name,
                    value=value,
                )
            )
    memory = found.get(HAMI_MEMORY)
    if memory is not None and memory < 1:
        raise ShareError(
            wording(
                gettext_noop("%(name)s is MiB of one GPU's memory, at least 1; got %(value)s"),
                name=HAMI_MEMORY,
                value=memory,
            )
        )
    if memory is None and percent is None:
        # HAMi gives a pod without a memory request all of the GPU's memory
        percent = 100
    return ShareRead(
        style="hami",
        milli=None if cores is None else cores * 10,
        memory_mib=memory,
        memory_percent=percent,
    )


def _fraction(found: Mapping[str, str]) -> ShareRead:
    if FRACTION_ANNOTATION in found and MEMORY_ANNOTATION in found:
        raise ShareError(
            wording(
                gettext_noop("annotations %(fraction)s and %(memory)s both set; give one"),
                fraction=FRACTION_ANNOTATION,
                memory=MEMORY_ANNOTATION,
            )
        )
    if FRACTION_ANNOTATION in found:
        raw = found[FRACTION_ANNOTATION]
        try:
            fraction = Decimal(str(raw).strip())
        except InvalidOperation:
            fraction = Decimal("NaN")
        if not fraction.is_finite() or not 0 < fraction <= 1:
            raise ShareError(
                wording(
                    gettext_noop(
                        "annotation %(name)s is the part of one GPU, above 0 and at most 1 "
                        '(e.g. "0.5"); got %(value)s'
                    ),
                    name=FRACTION_ANNOTATION,
                    value=repr(raw),
                )
            )
        return ShareRead(style="fraction", milli=max(1, math.ceil(fraction * MILLI)))
    raw = found[MEMORY_ANNOTATION]
    try:
        memory = int(str(raw).strip())
    except ValueError:
        memory = 0
    if memory < 1:
        raise ShareError(
            wording(
                gettext_noop(
                    "annotation %(name)s is MiB of one GPU's memory, a whole number above 0 "
                    '(e.g. "4096"); got %(value)s'
                ),
                name=MEMORY_ANNOTATION,
                value=repr(raw),
            )
        )
    return ShareRead(style="fraction", memory_mib=memory)


def _hami_requests(spec: Mapping[str, Any]) -> dict[str, int]:
    """HAMi's per-GPU resources of the pod's containers (the largest asked; HAMi applies
    them to every container that asks for GPUs)."""
    found: dict[str, int] = {}
    for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        resources = container.get("resources") or {}
        for section in ("limits", "requests"):
            for name, value in (resources.get(section) or {}).items():
                if name in HAMI_RESOURCES:
                    amount = _whole(name, value)
                    found[name] = max(found.get(name, 0), amount)
    return found


def _whole(name: str, value: Any) -> int:
    try:
        amount = Decimal(str(value).strip())
    except InvalidOperation:
        raise ShareError(_not_whole(name, value)) from None
    if not amount.is_finite() or amount != amount.to_integral_value():
        raise ShareError(_not_whole(name, value))
    return int(amount)


def _not_whole(name: str, value: Any) -> Wording:
    return wording(
        gettext_noop("%(name)s must be a whole number; got %(value)s"),
        name=name,
        value=repr(value),
    )
