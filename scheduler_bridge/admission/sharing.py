"""Packing GPU shares onto GPUs: which node and which GPU a fractional or whole-GPU pod of
a shared flavour takes (pure: no Django).

A shared GPU is split in thousandths ("milli"): a pod asking for 470 milli takes 47 % of
one GPU's compute and, where memory is enforced (HAMi), its memory request too. A share
never spans GPUs; a pod asking for whole GPUs takes GPUs nobody shares.

Three policies choose among the GPUs that fit:

- ``best-fit``: the GPU left with the least free capacity (whole GPUs: the node left with
  the fewest free GPUs), which keeps empty GPUs empty;
- ``random-fit``: any GPU that fits, drawn from a seeded generator (a baseline);
- ``fgd``: fragmentation gradient descent, after Weng et al., "Beware of Fragmentation:
  Scheduling GPU-Sharing Workloads with Fragmentation Gradient Descent" (USENIX ATC 2023).
  A node's *fragmentation* against a mix of request sizes is the free capacity that a
  request drawn from the mix could not use there, weighted by how often that request
  comes; ``fgd`` takes the placement that raises it least.

Free capacity that a request "could not use": a share of ``q`` milli cannot use a GPU
with less than ``q`` free (or too little free memory); whole GPUs cannot use a GPU that is
partly taken, nor any GPU of a node with too few untouched GPUs; a request for another
GPU model can use nothing on the node.

The pool keeps nodes grouped by their state (model and free capacity per GPU, sorted), so
a decision looks at each distinct state once and scores are remembered per state:
thousands of identical empty nodes cost one evaluation.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Final

MILLI: Final = 1000  # thousandths of a GPU in one whole GPU


class PackingPolicy(StrEnum):
    FGD = "fgd"
    BEST_FIT = "best-fit"
    RANDOM_FIT = "random-fit"


@dataclass(frozen=True, slots=True)
class ShareRequest:
    """What one pod asks of a shared flavour: ``gpus`` GPUs of ``milli`` thousandths each
    (a share, below 1000, is always of one GPU), ``memory_mib`` of each GPU's memory (0:
    none declared), on a GPU of one of ``models`` (empty: any)."""

    milli: int = MILLI
    gpus: int = 1
    memory_mib: int = 0
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not 1 <= self.milli <= MILLI:
            raise ValueError(f"a GPU share is 1..{MILLI} thousandths of one GPU, got {self.milli}")
        if self.gpus < 1:
            raise ValueError(f"a pod asks for at least one GPU, got {self.gpus}")
        if self.milli < MILLI and self.gpus != 1:
            raise ValueError(
                f"a share below one GPU ({self.milli} milli) is of one GPU, not {self.gpus}:"
                " ask for whole GPUs or for one share"
            )
        if self.memory_mib < 0:
            raise ValueError(f"memory must not be negative, got {self.memory_mib} MiB")

    @property
    def whole(self) -> bool:
        return self.milli == MILLI

    @property
    def total_milli(self) -> int:
        return self.milli * self.gpus


@dataclass(frozen=True, slots=True)
class SharedNode:
    """A node's GPUs of one shared flavour. ``used_milli`` and ``used_memory_mib`` (one
    entry per GPU; empty: all free) are what pods there already hold; ``memory_mib`` is one
    GPU's memory (0: not enforced, as with time-slicing)."""

    name: str
    gpus: int
    model: str = ""
    memory_mib: int = 0
    used_milli: tuple[int, ...] = ()
    used_memory_mib: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.gpus < 1:
            raise ValueError(f"node {self.name}: needs at least one GPU, got {self.gpus}")
        for label, used, limit in (
            ("used_milli", self.used_milli, MILLI),
            ("used_memory_mib", self.used_memory_mib, self.memory_mib or None),
        ):
            if used and len(used) != self.gpus:
                raise ValueError(
                    f"node {self.name}: {label} has {len(used)} entries for {self.gpus} GPUs"
                )
            for value in used:
                if value < 0 or (limit is not None and value > limit):
                    raise ValueError(f"node {self.name}: {label} {value} is out of range")


@dataclass(frozen=True, slots=True)
class SharePlacement:
    """Where one pod goes: GPUs ``gpu_indexes`` of ``node``, each giving ``milli`` and
    ``memory_mib``."""

    node: str
    gpu_indexes: tuple[int, ...]
    milli: int
    memory_mib: int = 0


# One GPU's free state: (free milli, free memory MiB); a node's state is its model, one
# GPU's memory and the sorted free states of its GPUs.
_Free = tuple[int, int]
_State = tuple[str, int, tuple[_Free, ...]]
# A placement's score on a node in some state (lower is better) and the free state of the
# GPU a share takes (whole GPUs: any untouched GPU).
_Choice = tuple[float, _Free]


@dataclass(slots=True)
class _Node:
    name: str
    model: str
    memory_mib: int
    free_milli: list[int]
    free_memory: list[int]

    def state(self) -> _State:
        return (
            self.model,
            self.memory_mib,
            tuple(sorted(zip(self.free_milli, self.free_memory, strict=True))),
        )


@dataclass(frozen=True, slots=True)
class RequestMix:
    """How often each request shape comes (weights need not sum to one): what ``fgd``
    measures fragmentation against. Built from recent arrivals or a trace."""

    weights: Mapping[ShareRequest, float] = field(default_factory=dict)

    @classmethod
    def of(cls, requests: Iterable[ShareRequest]) -> RequestMix:
        counts: dict[ShareRequest, float] = {}
        for request in requests:
            counts[request] = counts.get(request, 0.0) + 1.0
        return cls(counts)

    def normalised(self) -> tuple[tuple[ShareRequest, float], ...]:
        total = sum(self.weights.values())
        if total <= 0:
            return ()
        return tuple(
            (request, weight / total)
            for request, weight in sorted(self.weights.items(), key=_request_key)
            if weight > 0
        )


def _request_key(item: tuple[ShareRequest, float]) -> tuple[int, int, int, tuple[str, ...]]:
    request = item[0]
    return (request.gpus, request.milli, request.memory_mib, request.models)


def _gpu_serves(free: _Free, request: ShareRequest, gpu_memory: int) -> bool:
    """Whether one GPU in state ``free`` can give ``request`` what it asks of one GPU."""
    milli, memory = free
    if request.whole:
        return milli == MILLI and (not gpu_memory or memory == gpu_memory)
    return milli >= request.milli and (
        not request.memory_mib or not gpu_memory or memory >= request.memory_mib
    )


def fragmentation(state: _State, mix: tuple[tuple[ShareRequest, float], ...]) -> float:
    """Expected free milli on a node in ``state`` that a request drawn from ``mix`` could
    not use (the FGD paper's node fragmentation, GPU capacity only)."""
    model, gpu_memory, frees = state
    total_free = sum(milli for milli, _ in frees)
    if not total_free:
        return 0.0
    expected = 0.0
    for request, weight in mix:
        if request.models and model not in request.models:
            expected += weight * total_free
            continue
        if request.whole:
            untouched = sum(1 for free in frees if _gpu_serves(free, request, gpu_memory))
            # too few untouched GPUs: nothing here serves it; else the touched GPUs' rest
            enough = untouched >= request.gpus
            unusable = total_free - untouched * MILLI if enough else total_free
        else:
            unusable = sum(free[0] for free in frees if not _gpu_serves(free, request, gpu_memory))
        expected += weight * unusable
    return expected


class SharedPool:
    """The GPUs of one shared flavour across nodes, and placements onto them.

    ``place`` chooses (and does not apply); ``take`` and ``give_back`` change the pool.
    Decisions are deterministic for the same pool, request, policy, mix and seed: ties go
    to the node whose name sorts first, then the lowest GPU index."""

    def __init__(self, nodes: Iterable[SharedNode], *, seed: int = 0) -> None:
        self._nodes: dict[str, _Node] = {}
        self._by_state: dict[_State, set[str]] = {}
        self._random = random.Random(seed)
        self._fragmentation: dict[_State, float] = {}
        self._mix: tuple[tuple[ShareRequest, float], ...] = ()
        self._choice: dict[tuple[_State, ShareRequest, PackingPolicy], _Choice | None] = {}
        for spec in nodes:
            if spec.name in self._nodes:
                raise ValueError(f"node {spec.name} is given twice")
            used = spec.used_milli or (0,) * spec.gpus
            used_memory = spec.used_memory_mib or (0,) * spec.gpus
            node = _Node(
                name=spec.name,
                model=spec.model,
                memory_mib=spec.memory_mib,
                free_milli=[MILLI - value for value in used],
                free_memory=[spec.memory_mib - value for value in used_memory]
                if spec.memory_mib
                else [0] * spec.gpus,
            )
            self._nodes[node.name] = node
            self._by_state.setdefault(node.state(), set()).add(node.name)

    # -- reading -----------------------------------------------------------------------

    @property
    def capacity_milli(self) -> int:
        return MILLI * sum(len(node.free_milli) for node in self._nodes.values())

    @property
    def allocated_milli(self) -> int:
        return self.capacity_milli - sum(sum(n.free_milli) for n in self._nodes.values())

    def free_on(self, node: str) -> tuple[tuple[int, int], ...]:
        """(free milli, free memory MiB) of each GPU of ``node``, by GPU index."""
        found = self._nodes[node]
        return tuple(zip(found.free_milli, found.free_memory, strict=True))

    def could_ever_fit(self, request: ShareRequest) -> str | None:
        """Why ``request`` fits no GPU even when everything is free (None: it could)."""
        nodes = [n for n in self._nodes.values() if not request.models or n.model in request.models]
        if not nodes:
            return f"no node has a GPU of model {', '.join(request.models)}"
        if request.memory_mib and all(
            n.memory_mib and n.memory_mib < request.memory_mib for n in nodes
        ):
            largest = max(n.memory_mib for n in nodes)
            return (
                f"asks for {request.memory_mib} MiB of one GPU's memory; the largest GPU here"
                f" has {largest} MiB"
            )
        if request.gpus > max(len(n.free_milli) for n in nodes):
            return f"asks for {request.gpus} whole GPUs on one node; no node has that many"
        return None

    # -- deciding ----------------------------------------------------------------------

    def set_mix(self, mix: RequestMix) -> None:
        """What ``fgd`` measures fragmentation against (remembered scores are dropped)."""
        normalised = mix.normalised()
        if normalised != self._mix:
            self._mix = normalised
            self._fragmentation.clear()
            self._choice.clear()

    def place(
        self, request: ShareRequest, policy: PackingPolicy = PackingPolicy.FGD
    ) -> SharePlacement | None:
        """Where ``request`` would go under ``policy`` (None: no GPU can hold it now)."""
        policy = PackingPolicy(policy)
        if policy is PackingPolicy.RANDOM_FIT:
            return self._random_fit(request)
        best: tuple[float, str, _State] | None = None
        for state, names in self._by_state.items():
            choice = self._choose(state, request, policy)
            if choice is None:
                continue
            score = choice[0]
            name = min(names)
            if best is None or (score, name) < best[:2]:
                best = (score, name, state)
        if best is None:
            return None
        return self._placement_on(self._nodes[best[1]], request, policy)

    def take(self, placement: SharePlacement) -> None:
        """Apply a placement: its GPUs give what it asks. Refuses what does not fit."""
        node = self._nodes[placement.node]
        for index in placement.gpu_indexes:
            if node.free_milli[index] < placement.milli or (
                node.memory_mib and node.free_memory[index] < placement.memory_mib
            ):
                raise ValueError(
                    f"GPU {index} of {node.name} has {node.free_milli[index]} milli free; "
                    f"{placement.milli} asked"
                )
        self._move(node, placement, sign=-1)

    def give_back(self, placement: SharePlacement) -> None:
        """Undo ``take`` (the pod ended or was preempted)."""
        node = self._nodes[placement.node]
        for index in placement.gpu_indexes:
            if node.free_milli[index] + placement.milli > MILLI:
                raise ValueError(f"GPU {index} of {node.name} would hold less than nothing")
        self._move(node, placement, sign=+1)

    # -- inside ------------------------------------------------------------------------

    def _move(self, node: _Node, placement: SharePlacement, *, sign: int) -> None:
        before = node.state()
        members = self._by_state[before]
        members.discard(node.name)
        if not members:
            del self._by_state[before]
        for index in placement.gpu_indexes:
            node.free_milli[index] += sign * placement.milli
            if node.memory_mib:
                node.free_memory[index] += sign * placement.memory_mib
        self._by_state.setdefault(node.state(), set()).add(node.name)

    def _fragmentation_of(self, state: _State) -> float:
        known = self._fragmentation.get(state)
        if known is None:
            known = self._fragmentation[state] = fragmentation(state, self._mix)
        return known

    def _choose(
        self, state: _State, request: ShareRequest, policy: PackingPolicy
    ) -> _Choice | None:
        """The best score of ``request`` on a node in ``state`` and the GPU state it takes,
        or None if it does not fit there; remembered per state."""
        key = (state, request, policy)
        if key in self._choice:
            return self._choice[key]
        choice: _Choice | None = None
        if not request.models or state[0] in request.models:
            for after, taken in _states_after(state, request):
                if policy is PackingPolicy.FGD:
                    score = self._fragmentation_of(after) - self._fragmentation_of(state)
                else:
                    score = _leftover(after, taken, request)
                if choice is None or score < choice[0]:
                    choice = (score, taken)
        self._choice[key] = choice
        return choice

    def _placement_on(
        self, node: _Node, request: ShareRequest, policy: PackingPolicy
    ) -> SharePlacement:
        """The GPUs of ``node`` for ``request``: the ones the chosen state change takes."""
        state = node.state()
        choice = self._choose(state, request, policy)
        assert choice is not None
        if request.whole:
            indexes = tuple(
                index
                for index in range(len(node.free_milli))
                if _gpu_serves(
                    (node.free_milli[index], node.free_memory[index]), request, node.memory_mib
                )
            )[: request.gpus]
        else:
            # the GPU in the free state the chosen change takes (lowest index among equals)
            wanted = choice[1]
            indexes = (
                next(
                    index
                    for index in range(len(node.free_milli))
                    if (node.free_milli[index], node.free_memory[index]) == wanted
                ),
            )
        return SharePlacement(
            node=node.name,
            gpu_indexes=indexes,
            milli=request.milli,
            memory_mib=request.memory_mib if node.memory_mib else 0,
        )

    def _random_fit(self, request: ShareRequest) -> SharePlacement | None:
        """A GPU drawn uniformly among all that hold ``request`` (whole GPUs: a node drawn
        uniformly among those with enough untouched GPUs)."""
        weighted: list[tuple[_State, int, int]] = []  # state, GPUs that serve, nodes
        for state, names in self._by_state.items():
            if request.models and state[0] not in request.models:
                continue
            serving = sum(1 for free in state[2] if _gpu_serves(free, request, state[1]))
            if serving < request.gpus:
                continue
            weighted.append((state, 1 if request.whole else serving, len(names)))
        total = sum(serving * nodes for _state, serving, nodes in weighted)
        if not total:
            return None
        weighted.sort(key=lambda entry: min(self._by_state[entry[0]]))
        drawn = self._random.randrange(total)
        for state, serving, nodes in weighted:
            if drawn >= serving * nodes:
                drawn -= serving * nodes
                continue
            node = self._nodes[sorted(self._by_state[state])[drawn // serving]]
            if request.whole:
                return self._placement_on(node, request, PackingPolicy.BEST_FIT)
            index = [
                index
                for index in range(len(node.free_milli))
                if _gpu_serves(
                    (node.free_milli[index], node.free_memory[index]), request, node.memory_mib
                )
            ][drawn % serving]
            return SharePlacement(
                node=node.name,
                gpu_indexes=(index,),
                milli=request.milli,
                memory_mib=request.memory_mib if node.memory_mib else 0,
            )
        raise AssertionError("the draw is within the total")


def _states_after(state: _State, request: ShareRequest) -> Iterable[tuple[_State, _Free]]:
    """Each distinct state a node in ``state`` can be left in by placing ``request``, with
    the free state of the GPU the share takes."""
    model, gpu_memory, frees = state
    if request.whole:
        untouched = [i for i, free in enumerate(frees) if _gpu_serves(free, request, gpu_memory)]
        if len(untouched) < request.gpus:
            return
        taken = set(untouched[: request.gpus])
        rest = [free for i, free in enumerate(frees) if i not in taken]
        used = (0, gpu_memory - (request.memory_mib if gpu_memory else 0))
        yield (model, gpu_memory, tuple(sorted(rest + [used] * request.gpus))), frees[untouched[0]]
        return
    seen: set[_Free] = set()
    for i, free in enumerate(frees):
        if free in seen or not _gpu_serves(free, request, gpu_memory):
            continue
        seen.add(free)
        left = (
            free[0] - request.milli,
            free[1] - request.memory_mib if gpu_memory else free[1],
        )
        yield (model, gpu_memory, tuple(sorted(frees[:i] + (left,) + frees[i + 1 :]))), free


def _leftover(after: _State, taken: _Free, request: ShareRequest) -> float:
    """Best-fit's score: the free capacity left where the request went. A share goes to
    the GPU left with the least free (then the node left with the least free); whole GPUs
    go to the node left with the least free."""
    node_free = sum(milli for milli, _ in after[2])
    if request.whole:
        return float(node_free)
    return float((taken[0] - request.milli) * MILLI * 64 + node_free)
