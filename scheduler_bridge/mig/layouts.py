"""Legal MIG layouts of one GPU: checking them and enumerating them once per product.

A layout is the set of GPU instances on one GPU, each a profile placed at a
start memory slice. The rules (docs/mig.md#placements; NVIDIA MIG user guide
"Supported MIG profiles", placements from ``nvidia-smi mig -lgipp``):

* each profile only at its listed starts, occupying ``memory_slices``
  consecutive slices inside 0..7, without overlapping another instance;
* compute slices add up to at most 7, at most 7 instances;
* at most one ``+me`` (media extensions) instance per GPU.

The planner works on count vectors (how many of each profile), because that is
all mig-parted can express; ``LayoutTable`` holds every realisable count
vector of a product with a witness placement, so a vector is known to be
realisable before it is ever emitted. Pure Python, no Django.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache

from scheduler_bridge.inventory.catalogue import (
    MIG_COMPUTE_SLICES,
    MIG_MAX_INSTANCES,
    MIG_MEMORY_SLICES,
    GpuProduct,
    MigProfile,
)


class IllegalMigLayout(ValueError):
    """A layout (or count vector) that the GPU cannot hold; the message says why."""


@dataclass(frozen=True, order=True)
class Placement:
    """One GPU instance: a profile name and its first memory slice."""

    profile: str
    start: int


def _as_placement(item: Placement | tuple[str, int]) -> Placement:
    return item if isinstance(item, Placement) else Placement(item[0], item[1])


@dataclass(frozen=True)
class MigLayout:
    """What one GPU holds: MIG disabled, or MIG enabled with placed instances.

    Instances are kept sorted by start so equal layouts compare equal.
    """

    mig_enabled: bool
    instances: tuple[Placement, ...] = ()

    def __post_init__(self) -> None:
        if not self.mig_enabled and self.instances:
            raise IllegalMigLayout("a GPU with MIG disabled holds no MIG instances")
        ordered = tuple(sorted(self.instances, key=lambda p: (p.start, p.profile)))
        object.__setattr__(self, "instances", ordered)

    @classmethod
    def disabled(cls) -> MigLayout:
        """The whole GPU, exposed as ``nvidia.com/gpu``."""
        return cls(mig_enabled=False)

    @classmethod
    def of(cls, *instances: Placement | tuple[str, int]) -> MigLayout:
        """MIG enabled with these instances, e.g. ``MigLayout.of(("3g.40gb", 0))``."""
        return cls(mig_enabled=True, instances=tuple(_as_placement(i) for i in instances))

    def counts(self) -> dict[str, int]:
        """Instances per profile name, in order of first start."""
        result: dict[str, int] = {}
        for placement in self.instances:
            result[placement.profile] = result.get(placement.profile, 0) + 1
        return result

    def describe(self) -> str:
        if not self.mig_enabled:
            return "MIG disabled"
        if not self.instances:
            return "MIG enabled, no instances"
        return ", ".join(f"{p.profile}@{p.start}" for p in self.instances)


def layout_violations(product: GpuProduct, layout: MigLayout) -> list[str]:
    """Every rule the layout breaks on ``product``, as sentences; empty when legal."""
    if not layout.mig_enabled:
        return []
    if not product.mig_capable:
        return [f"{product.name} does not support MIG"]
    profiles = {p.name: p for p in product.mig_profiles}
    problems: list[str] = []
    used = [False] * MIG_MEMORY_SLICES
    compute = media = 0
    for placement in layout.instances:
        profile = profiles.get(placement.profile)
        if profile is None:
            problems.append(f"{product.name} has no MIG profile {placement.profile!r}")
            continue
        if placement.start not in profile.starts:
            starts = ", ".join(map(str, profile.starts))
            problems.append(
                f"{profile.name} cannot start at memory slice {placement.start} (starts: {starts})"
            )
            continue
        span = range(placement.start, placement.start + profile.memory_slices)
        if any(used[s] for s in span):
            problems.append(f"{profile.name}@{placement.start} overlaps another instance")
        for s in span:
            used[s] = True
        compute += profile.compute_slices
        media += profile.media_extensions
    if compute > MIG_COMPUTE_SLICES:
        problems.append(f"uses {compute} compute slices, more than {MIG_COMPUTE_SLICES}")
    if media > 1:
        problems.append(f"has {media} media-extension (+me) instances, at most 1 per GPU")
    if len(layout.instances) > MIG_MAX_INSTANCES:
        problems.append(f"has {len(layout.instances)} instances, at most {MIG_MAX_INSTANCES}")
    return problems


def is_legal_layout(product: GpuProduct, layout: MigLayout) -> bool:
    """True when ``product`` can hold ``layout`` (see the module docstring for the rules)."""
    return not layout_violations(product, layout)


def check_layout(product: GpuProduct, layout: MigLayout, where: str = "") -> None:
    """Raise ``IllegalMigLayout`` naming ``where`` and every violated rule."""
    problems = layout_violations(product, layout)
    if problems:
        prefix = f"{where}: " if where else ""
        raise IllegalMigLayout(
            f"{prefix}{layout.describe()} on {product.name}: " + "; ".join(problems)
        )


CountVector = tuple[int, ...]


@dataclass(frozen=True)
class LayoutTable:
    """Every legal layout of one product, grouped by count vector.

    ``profiles`` fixes the order of the vector components (catalogue order).
    ``vectors`` lists every realisable vector (the empty one included) and
    ``maximal`` those no other vector dominates. ``placements[v]`` holds every
    placement of ``v``, best first: most compute still addable, then most
    distinct additions still possible, so the free slices stay in aligned
    blocks a later plan can use (a lone 3g goes to slices 4-7, keeping 0-3 for a 4g).
    """

    product: GpuProduct
    profiles: tuple[MigProfile, ...]
    vectors: tuple[CountVector, ...]
    maximal: tuple[CountVector, ...]
    placements: Mapping[CountVector, tuple[tuple[Placement, ...], ...]] = field(repr=False)

    def vector_of(self, counts: Mapping[str, int]) -> CountVector:
        """The count vector of ``{profile: count}``; unknown profiles raise IllegalMigLayout."""
        names = [p.name for p in self.profiles]
        unknown = sorted(set(counts) - set(names))
        if unknown:
            raise IllegalMigLayout(f"{self.product.name} has no MIG profile {unknown[0]!r}")
        return tuple(int(counts.get(n, 0)) for n in names)

    def counts_of(self, vector: CountVector) -> dict[str, int]:
        """``{profile: count}`` for the non-zero components, in catalogue order."""
        return {p.name: n for p, n in zip(self.profiles, vector, strict=True) if n}

    def compute_slices(self, vector: CountVector) -> int:
        return sum(p.compute_slices * n for p, n in zip(self.profiles, vector, strict=True))


# A profile's shape, without its name: (compute slices, memory slices, starts,
# media extensions). Every catalogue product has the same seven shapes, so the
# enumeration below runs once per shape tuple, not once per product.
_Shape = tuple[int, int, tuple[int, ...], bool]


def _shape(profile: MigProfile) -> _Shape:
    return profile.compute_slices, profile.memory_slices, profile.starts, profile.media_extensions


def _walk(
    shapes: tuple[_Shape, ...],
    used: int,
    pos: int,
    compute: int,
    media: int,
    count: int,
) -> Iterator[tuple[tuple[int, int], ...]]:
    """Yield every legal set of additions to a layout, as (profile index, start) pairs.

    ``used`` is the bitmask of occupied memory slices. Walking slice by slice
    and only ever placing at the current slice enumerates each set once.
    """
    while pos < MIG_MEMORY_SLICES and used >> pos & 1:
        pos += 1
    if pos >= MIG_MEMORY_SLICES:
        yield ()
        return
    # Leave this slice free.
    yield from _walk(shapes, used, pos + 1, compute, media, count)
    if count >= MIG_MAX_INSTANCES:
        return
    for index, (slices, size, starts, me) in enumerate(shapes):
        end = pos + size
        mask = ((1 << size) - 1) << pos
        if (
            pos not in starts
            or end > MIG_MEMORY_SLICES
            or used & mask
            or compute + slices > MIG_COMPUTE_SLICES
            or media + me > 1
        ):
            continue
        for rest in _walk(shapes, used | mask, end, compute + slices, media + me, count + 1):
            yield ((index, pos), *rest)


@cache
def _free_space_score(
    shapes: tuple[_Shape, ...], used: int, compute: int, media: int, count: int
) -> tuple[int, int]:
    """(most compute slices still addable, distinct count vectors still addable)."""
    best = 0
    additions: set[tuple[int, ...]] = set()
    for extra in _walk(shapes, used, 0, compute, media, count):
        best = max(best, sum(shapes[i][0] for i, _ in extra))
        additions.add(tuple(sorted(i for i, _ in extra)))
    return best, len(additions)


@cache
def _enumerate(
    shapes: tuple[_Shape, ...],
) -> dict[CountVector, tuple[tuple[tuple[int, int], ...], ...]]:
    """Every legal placement set grouped by count vector, best placement first."""
    grouped: dict[CountVector, list[tuple[int, int, tuple[tuple[int, int], ...]]]] = {}
    for chosen in _walk(shapes, 0, 0, 0, 0, 0):
        vector = [0] * len(shapes)
        used = compute = media = 0
        for index, start in chosen:
            slices, size, _, me = shapes[index]
            vector[index] += 1
            used |= ((1 << size) - 1) << start
            compute += slices
            media += me
        headroom, ways = _free_space_score(shapes, used, compute, media, len(chosen))
        # Most usable free space first; the placement itself breaks ties so the
        # table, and every plan built on it, is deterministic.
        grouped.setdefault(tuple(vector), []).append((-headroom, -ways, chosen))
    return {v: tuple(chosen for _, _, chosen in sorted(e)) for v, e in sorted(grouped.items())}


@cache
def layout_table(product: GpuProduct) -> LayoutTable:
    """Every legal layout of the product (2,319 for the catalogue shapes; cached).

    Raises ``IllegalMigLayout`` for a product without MIG.
    """
    if not product.mig_capable:
        raise IllegalMigLayout(f"{product.name} does not support MIG")
    profiles = product.mig_profiles
    enumerated = _enumerate(tuple(_shape(p) for p in profiles))
    placements = {
        vector: tuple(
            tuple(Placement(profiles[i].name, start) for i, start in chosen) for chosen in options
        )
        for vector, options in enumerated.items()
    }
    vectors = tuple(placements)
    maximal = tuple(
        v
        for v in vectors
        if not any(w != v and all(a <= b for a, b in zip(v, w, strict=True)) for w in vectors)
    )
    return LayoutTable(product, profiles, vectors, maximal, placements)


def layout_from_counts(
    product: GpuProduct, counts: Mapping[str, int], keep: MigLayout | None = None
) -> MigLayout:
    """A legal placement of ``{profile: count}`` (MIG enabled).

    Prefers the placement that keeps most of ``keep``'s instances where they
    are, then the one leaving the most usable free space. Raises
    ``IllegalMigLayout`` when no placement exists.
    """
    table = layout_table(product)
    vector = table.vector_of(counts)
    options = table.placements.get(vector)
    if options is None:
        wanted = ", ".join(f"{n}x {p}" for p, n in table.counts_of(vector).items())
        raise IllegalMigLayout(f"{product.name} cannot hold {wanted} on one GPU")
    if keep is None or not keep.instances:
        return MigLayout(True, options[0])
    kept = set(keep.instances)
    best = max(options, key=lambda o: sum(p in kept for p in o))  # first max wins: stable
    return MigLayout(True, best)


def counts_realisable(product: GpuProduct, counts: Mapping[str, int]) -> bool:
    """True when some legal layout of ``product`` holds exactly ``counts``."""
    if not product.mig_capable:
        return not any(counts.values())
    table = layout_table(product)
    try:
        return table.vector_of(counts) in table.placements
    except IllegalMigLayout:
        return False


def legal_layouts(product: GpuProduct) -> Iterator[MigLayout]:
    """Every legal MIG-enabled layout of the product (none without MIG); for tests and tools."""
    if not product.mig_capable:
        return
    table = layout_table(product)
    for vector in table.vectors:
        for placement in table.placements[vector]:
            yield MigLayout(True, placement)
