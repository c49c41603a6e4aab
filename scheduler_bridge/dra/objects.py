"""Dynamic Resource Allocation objects (``resource.k8s.io/v1``) as Tidegate reads them.

Kubernetes' JSON shapes (camelCase dicts, as both gateways hold them) become small frozen
records: the devices a driver publishes in its ResourceSlices, the DeviceClasses that
select among them, and the device requests of ResourceClaims and ResourceClaimTemplates.
Field meanings follow the API reference of ``k8s.io/api/resource/v1``; only what queueing,
quotas and metering need is kept. Malformed objects raise :class:`DraError` with what was
wrong and where.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from scheduler_bridge.quantity import InvalidQuantity, parse_quantity

EXACT_COUNT = "ExactCount"
ALL = "All"
ALLOCATION_MODES = (EXACT_COUNT, ALL)


class DraError(ValueError):
    """An object Tidegate cannot read, or a request it cannot serve; the message says
    what and how to fix it."""


@dataclass(frozen=True, slots=True)
class Semver:
    """A ``version`` attribute (semantic version), ordered by major, minor, patch and
    pre-release (a pre-release sorts before its release)."""

    text: str
    key: tuple[int, int, int, tuple[Any, ...]]

    @classmethod
    def parse(cls, text: str) -> Semver:
        core, _, pre = text.partition("+")[0].partition("-")
        parts = core.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise DraError(f"{text!r} is not a semantic version (expected e.g. 12.4.0)")
        release = (
            (1,)
            if not pre
            else (0, *((int(p), "") if p.isdigit() else (0, p) for p in pre.split(".")))
        )
        return cls(text, (int(parts[0]), int(parts[1]), int(parts[2]), release))


AttributeValue = str | int | bool | Semver


@dataclass(frozen=True, slots=True)
class Device:
    """One device of a ResourceSlice. ``attributes`` and ``capacity`` are keyed by domain
    then name: an unqualified name belongs to the driver's domain, as Kubernetes' CEL
    environment reads it (``device.attributes["gpu.nvidia.com"].productName``)."""

    driver: str
    pool: str
    node: str | None  # None: reachable from several nodes (allNodes or a node selector)
    name: str
    attributes: Mapping[str, Mapping[str, AttributeValue]]
    capacity: Mapping[str, Mapping[str, Decimal]]
    # several claims may share it, each taking part of its capacity (consumable capacity)
    multiple_allocations: bool = False
    # shared counters it draws on (partitionable devices such as MIG): per counter set,
    # per counter, how much
    consumes: Mapping[str, Mapping[str, Decimal]] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        """(driver, pool, device): how a claim's allocation result names it."""
        return (self.driver, self.pool, self.name)

    @property
    def is_partition(self) -> bool:
        """It draws on shared counters: one of a partitionable GPU's alternatives, counted
        through its GPU (dra.partitions), never on its own."""
        return bool(self.consumes)

    def attribute(self, name: str) -> AttributeValue | None:
        """An attribute of the driver's own domain, or None."""
        return self.attributes.get(self.driver, {}).get(name)

    def capacity_of(self, name: str) -> Decimal | None:
        return self.capacity.get(self.driver, {}).get(name)


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...]  # CEL expressions, all of which a device must meet
    # the extended resource (e.g. nvidia.com/gpu) this class serves, if any
    extended_resource_name: str | None = None


@dataclass(frozen=True, slots=True)
class SubRequest:
    """One way to satisfy a device request: a device class, selectors and how many."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    # per capacity name (driver's domain), the amount each device gives this claim
    capacity: Mapping[str, Decimal] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class DeviceRequest:
    """A request of a claim: ``exactly`` one way, or ``firstAvailable`` ways in order."""

    name: str
    options: tuple[SubRequest, ...]
    prioritized: bool = False


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    requests: tuple[DeviceRequest, ...]


# ------------------------------------------------------------------------- parsing
def _qualified(driver: str, key: str) -> tuple[str, str]:
    domain, slash, name = key.rpartition("/")
    return (domain, name) if slash else (driver, key)


def _attribute_value(value: Mapping[str, Any], where: str) -> AttributeValue:
    for kind in ("string", "int", "bool"):
        if kind in value:
            found = value[kind]
            if kind == "int" and (isinstance(found, bool) or not isinstance(found, int)):
                raise DraError(f"{where}: int attribute {found!r} is not a whole number")
            return found  # type: ignore[no-any-return]
    if "version" in value:
        return Semver.parse(str(value["version"]))
    raise DraError(f"{where}: an attribute needs one of string, int, bool or version")


def _quantity(value: Any, where: str) -> Decimal:
    try:
        return parse_quantity(value if isinstance(value, int) else str(value))
    except InvalidQuantity as error:
        raise DraError(f"{where}: {error}") from error


def devices_of_slice(resource_slice: Mapping[str, Any]) -> list[Device]:
    """The devices a ResourceSlice publishes, with the node they are on."""
    meta = resource_slice.get("metadata") or {}
    spec = resource_slice.get("spec") or {}
    where = f"ResourceSlice {meta.get('name', '?')}"
    driver = str(spec.get("driver") or "")
    pool = str((spec.get("pool") or {}).get("name") or "")
    if not driver or not pool:
        raise DraError(f"{where}: spec.driver and spec.pool.name are required")
    node = spec.get("nodeName") or None
    found: list[Device] = []
    for raw in spec.get("devices") or []:
        name = str(raw.get("name") or "")
        at = f"{where} device {name or '?'}"
        if not name:
            raise DraError(f"{at}: a device needs a name")
        attributes: dict[str, dict[str, AttributeValue]] = {}
        for key, value in (raw.get("attributes") or {}).items():
            domain, attr = _qualified(driver, key)
            attributes.setdefault(domain, {})[attr] = _attribute_value(value or {}, at)
        capacity: dict[str, dict[str, Decimal]] = {}
        for key, value in (raw.get("capacity") or {}).items():
            domain, cap = _qualified(driver, key)
            capacity.setdefault(domain, {})[cap] = _quantity((value or {}).get("value"), at)
        consumes: dict[str, dict[str, Decimal]] = {}
        for use in raw.get("consumesCounters") or []:
            counters = consumes.setdefault(str(use.get("counterSet") or ""), {})
            for counter, value in (use.get("counters") or {}).items():
                counters[counter] = _quantity((value or {}).get("value"), at)
        # a slice with perDeviceNodeSelection names each device's node on the device
        on = raw.get("nodeName") or node
        found.append(
            Device(
                driver=driver,
                pool=pool,
                node=str(on) if on else None,
                name=name,
                attributes=attributes,
                capacity=capacity,
                multiple_allocations=bool(raw.get("allowMultipleAllocations")),
                consumes=consumes,
            )
        )
    return found


def counter_sets_of_slices(
    resource_slices: Iterable[Mapping[str, Any]],
) -> dict[tuple[str, str, str], dict[str, Decimal]]:
    """The shared counter sets the slices publish (``spec.sharedCounters``), by (driver,
    pool, counter set): what a partitionable GPU's devices draw on together. Sets that
    cannot be read are left out (their GPUs are then checked by profile counts only)."""
    found: dict[tuple[str, str, str], dict[str, Decimal]] = {}
    for resource_slice in resource_slices:
        spec = resource_slice.get("spec") or {}
        driver = str(spec.get("driver") or "")
        pool = str((spec.get("pool") or {}).get("name") or "")
        for counter_set in spec.get("sharedCounters") or []:
            name = str(counter_set.get("name") or "")
            try:
                found[(driver, pool, name)] = {
                    counter: _quantity((value or {}).get("value"), f"counter set {name}")
                    for counter, value in (counter_set.get("counters") or {}).items()
                }
            except DraError:
                continue
    return found


def devices_of_slices(
    resource_slices: Iterable[Mapping[str, Any]],
) -> tuple[list[Device], list[str]]:
    """Every device the slices publish, and why each slice that cannot be read was left
    out (the rest still count; inventory names those in the cluster's status)."""
    devices: list[Device] = []
    unreadable: list[str] = []
    for resource_slice in resource_slices:
        try:
            devices.extend(devices_of_slice(resource_slice))
        except DraError as error:
            unreadable.append(str(error))
    return devices, unreadable


def device_class(obj: Mapping[str, Any]) -> DeviceClass:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    name = str(meta.get("name") or "")
    selectors = []
    for selector in spec.get("selectors") or []:
        expression = (selector.get("cel") or {}).get("expression")
        if not expression:
            raise DraError(f"DeviceClass {name}: a selector without a CEL expression")
        selectors.append(str(expression))
    return DeviceClass(
        name=name,
        selectors=tuple(selectors),
        extended_resource_name=spec.get("extendedResourceName") or None,
    )


def _selectors(raw: Sequence[Mapping[str, Any]] | None, where: str) -> tuple[str, ...]:
    found = []
    for selector in raw or []:
        expression = (selector.get("cel") or {}).get("expression")
        if not expression:
            raise DraError(f"{where}: a selector without a CEL expression")
        found.append(str(expression))
    return tuple(found)


def _sub_request(raw: Mapping[str, Any], name: str, where: str) -> SubRequest:
    device_class_name = str(raw.get("deviceClassName") or "")
    if not device_class_name:
        raise DraError(f"{where}: deviceClassName is required")
    mode = str(raw.get("allocationMode") or EXACT_COUNT)
    if mode not in ALLOCATION_MODES:
        raise DraError(f"{where}: allocationMode {mode!r} is not ExactCount or All")
    count = raw.get("count", 1) if mode == EXACT_COUNT else 0
    if mode == EXACT_COUNT and (isinstance(count, bool) or not isinstance(count, int) or count < 1):
        raise DraError(f"{where}: count must be a whole number from 1, not {count!r}")
    capacity = {
        key.rpartition("/")[2]: _quantity(value, where)
        for key, value in ((raw.get("capacity") or {}).get("requests") or {}).items()
    }
    return SubRequest(
        name=name,
        device_class=device_class_name,
        selectors=_selectors(raw.get("selectors"), where),
        mode=mode,
        count=count,
        capacity=capacity,
    )


def claim_spec(spec: Mapping[str, Any], where: str) -> ClaimSpec:
    """The device requests of a ResourceClaim's ``spec`` (a template's ``spec.spec``)."""
    requests = []
    for raw in (spec.get("devices") or {}).get("requests") or []:
        name = str(raw.get("name") or "")
        at = f"{where} request {name or '?'}"
        if not name:
            raise DraError(f"{at}: a request needs a name")
        exactly, first = raw.get("exactly"), raw.get("firstAvailable")
        if bool(exactly) == bool(first):
            raise DraError(f"{at}: give exactly one of exactly and firstAvailable")
        if exactly:
            requests.append(DeviceRequest(name, (_sub_request(exactly, name, at),)))
            continue
        options = tuple(
            _sub_request(sub, f"{name}/{sub.get('name', i)}", f"{at}/{sub.get('name', i)}")
            for i, sub in enumerate(first)
        )
        requests.append(DeviceRequest(name, options, prioritized=True))
    return ClaimSpec(tuple(requests))
