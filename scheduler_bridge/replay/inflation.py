"""The inflation experiment of the FGD paper (Weng et al., USENIX ATC 2023) on the openb
trace: tasks drawn from the trace arrive and never leave until what they asked for
reaches the cluster's GPUs; how much a packing policy manages to place tells how much
capacity it loses to fragments (pure: no Django).

GPU capacity only: Tidegate does not schedule CPU, so the trace's CPU requests are not
placed (the paper's figures also count CPU).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from scheduler_bridge.admission.sharing import (
    MILLI,
    PackingPolicy,
    RequestMix,
    SharedNode,
    SharedPool,
    ShareRequest,
)
from scheduler_bridge.replay.openb import OpenbNode, OpenbTask


@dataclass(frozen=True, slots=True)
class InflationResult:
    policy: PackingPolicy
    gpus: int
    arrived_ratio: float  # GPUs asked for over GPUs there, at the end
    allocated_ratio: float  # GPUs placed over GPUs there, at the end
    allocated_ratio_at_90: float  # GPUs placed when arrivals reached 90 %
    failed_tasks: int
    tasks: int


def request_of(task: OpenbTask) -> ShareRequest:
    return ShareRequest(milli=task.gpu_milli, gpus=task.num_gpu, models=task.gpu_models)


def shared_nodes(nodes: Iterable[OpenbNode]) -> list[SharedNode]:
    return [SharedNode(name=n.name, gpus=n.gpus, model=n.model) for n in nodes if n.gpus]


def arrivals(tasks: list[OpenbTask], capacity_milli: int, seed: int) -> list[ShareRequest]:
    """Tasks drawn with replacement (seeded) until what they ask reaches the capacity."""
    if not tasks:
        raise ValueError("no GPU tasks to draw from")
    draw = random.Random(seed)
    drawn: list[ShareRequest] = []
    asked = 0
    while asked < capacity_milli:
        request = request_of(draw.choice(tasks))
        drawn.append(request)
        asked += request.total_milli
    return drawn


def inflate(
    nodes: list[SharedNode],
    requests: list[ShareRequest],
    mix: RequestMix,
    policy: PackingPolicy,
    *,
    seed: int = 0,
    step: Callable[[], None] = lambda: None,
) -> InflationResult:
    """Place ``requests`` in order under ``policy``; one that fits nowhere fails."""
    pool = SharedPool(nodes, seed=seed)
    pool.set_mix(mix)
    capacity = pool.capacity_milli
    asked = failed = 0
    at_90: float | None = None
    for request in requests:
        placement = pool.place(request, policy)
        if placement is None:
            failed += 1
        else:
            pool.take(placement)
        asked += request.total_milli
        if at_90 is None and asked >= 0.9 * capacity:
            at_90 = pool.allocated_milli / capacity
        step()
    return InflationResult(
        policy=policy,
        gpus=capacity // MILLI,
        arrived_ratio=asked / capacity,
        allocated_ratio=pool.allocated_milli / capacity,
        allocated_ratio_at_90=at_90 if at_90 is not None else pool.allocated_milli / capacity,
        failed_tasks=failed,
        tasks=len(requests),
    )
