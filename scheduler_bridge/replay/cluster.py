"""The cluster a replay runs on (its GPU products) and the quotas it runs under.

A replay cluster is one or more products (flavours), each a number of GPUs in nodes of
``gpus_per_node``; without a products file it is one product, ``gpu``. A cluster read from
a node list (openb) names its nodes instead (``ReplayCluster.nodes``), and a product may be
``shared``: its jobs hold thousandths of one GPU (admission/devices.py). Quotas are either
``proportional`` (capacity split in proportion to each tenant's share, largest remainders
first, so the guarantees add up exactly to the capacity) or read from a file.

Products file: ``flavor,gpus[,gpus_per_node,gpu_equivalent]``.
Quota file: ``tenant,guaranteed[,flavor,weight]`` (GPUs of that flavour; no flavour: the
first product), or Helios' ``vc,node num`` (node counts, read as shares).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .trace import TraceError, TraceJob, csv_rows

DEFAULT_FLAVOUR = "gpu"


@dataclass(frozen=True, slots=True)
class Product:
    flavor: str
    gpus: int
    gpus_per_node: int = 8
    gpu_equivalent: float = 1.0
    shared: bool = False  # jobs may hold a share of one GPU (counted in thousandths)

    @property
    def nodes(self) -> int:
        return math.ceil(self.gpus / self.gpus_per_node)


@dataclass(frozen=True, slots=True)
class ReplayNode:
    """One node of a cluster read from a node list: its name, product and GPUs."""

    name: str
    flavor: str
    gpus: int


@dataclass(frozen=True, slots=True)
class ReplayCluster:
    products: tuple[Product, ...]
    # the nodes one by one (a node list); empty: each product's GPUs in nodes of its
    # gpus_per_node
    nodes: tuple[ReplayNode, ...] = ()

    @property
    def capacity(self) -> int:
        return sum(p.gpus for p in self.products)

    @property
    def whole_gpus(self) -> int:
        """Capacity in whole GPUs: MIG instances and shares at their GPU equivalent."""
        return round(sum(p.gpus * p.gpu_equivalent for p in self.products))

    @property
    def default_flavor(self) -> str:
        return self.products[0].flavor

    def product(self, flavor: str | None) -> Product | None:
        wanted = flavor or self.default_flavor
        return next((p for p in self.products if p.flavor == wanted), None)

    def scaled(self, capacity: int) -> ReplayCluster:
        """The same products at another total capacity (for savings searches), split in
        proportion to their GPUs. A node list keeps its first nodes of each product, the
        last one cut to the product's share; otherwise nodes are even, of each product's
        ``gpus_per_node``."""
        total = self.capacity
        shares = split(capacity, {p.flavor: p.gpus for p in self.products}) if total else {}
        products = tuple(replace(p, gpus=shares.get(p.flavor, 0)) for p in self.products)
        if not self.nodes:
            return ReplayCluster(products)
        kept: list[ReplayNode] = []
        left = dict(shares)
        for node in self.nodes:
            room = left.get(node.flavor, 0)
            if room > 0:
                kept.append(replace(node, gpus=min(node.gpus, room)))
                left[node.flavor] = room - kept[-1].gpus
        return ReplayCluster(products, tuple(kept))

    def largest_node(self, flavor: str) -> int:
        """The most GPUs of ``flavor`` one node holds."""
        if self.nodes:
            return max((n.gpus for n in self.nodes if n.flavor == flavor), default=0)
        product = self.product(flavor)
        return 0 if product is None else min(product.gpus, product.gpus_per_node)


def node_list_cluster(nodes: Iterable[ReplayNode], *, shared: bool) -> ReplayCluster:
    """A cluster of the nodes given, one product per flavour (largest first, then by
    name), each ``shared`` or not."""
    listed = tuple(n for n in nodes if n.gpus > 0)
    if not listed:
        raise ValueError("the node list holds no node with GPUs")
    gpus: dict[str, int] = {}
    widest: dict[str, int] = {}
    for node in listed:
        gpus[node.flavor] = gpus.get(node.flavor, 0) + node.gpus
        widest[node.flavor] = max(widest.get(node.flavor, 0), node.gpus)
    order = sorted(gpus, key=lambda f: (-gpus[f], f))
    return ReplayCluster(
        tuple(Product(f, gpus[f], widest[f], shared=shared) for f in order), listed
    )


@dataclass(frozen=True)
class QuotaPlan:
    """Guaranteed GPUs per (tenant, flavour) and fair-share weights per tenant; optionally
    a tenant tree (``parents``: tenant -> parent, None or absent: under the cluster) with
    quotas on inner tenants too, and borrow and lend limits (absent: no limit)."""

    guaranteed: Mapping[tuple[str, str], int]
    weights: Mapping[str, float] = field(default_factory=dict)
    parents: Mapping[str, str | None] = field(default_factory=dict)
    borrow_limits: Mapping[tuple[str, str], int] = field(default_factory=dict)
    lend_limits: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def tenant_guarantee(self, tenant: str, cluster: ReplayCluster) -> float:
        """A tenant's guarantee in GPU-equivalents."""
        return sum(
            gpus * p.gpu_equivalent
            for p in cluster.products
            if (gpus := self.guaranteed.get((tenant, p.flavor), 0))
        )


def one_product(capacity: int, gpus_per_node: int = 8) -> ReplayCluster:
    if capacity < 1:
        raise ValueError("the capacity must be at least 1 GPU")
    if gpus_per_node < 1:
        raise ValueError("a node must have at least 1 GPU")
    return ReplayCluster((Product(DEFAULT_FLAVOUR, capacity, gpus_per_node),))


def read_products(path: Path) -> ReplayCluster:
    products: list[Product] = []
    for line, row in csv_rows(path, ("flavor", "gpus")):
        flavor = row["flavor"]
        if not flavor:
            raise TraceError(path, line, "flavor", "is empty")
        if any(p.flavor == flavor for p in products):
            raise TraceError(path, line, "flavor", f"{flavor!r} is listed twice")
        gpus = _whole(path, line, row, "gpus", 1)
        per_node = _whole(path, line, row, "gpus_per_node", 1) if row.get("gpus_per_node") else 8
        equivalent = 1.0
        if row.get("gpu_equivalent"):
            try:
                equivalent = float(row["gpu_equivalent"])
            except ValueError:
                equivalent = -1.0
            if not 0 < equivalent <= 100:
                raise TraceError(
                    path, line, "gpu_equivalent", "must be a number above 0, e.g. 1 or 0.5"
                )
        products.append(Product(flavor, gpus, per_node, equivalent))
    if not products:
        raise TraceError(path, None, None, "lists no products; add rows flavor,gpus")
    return ReplayCluster(tuple(products))


def split(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    """``total`` split in proportion to ``shares``, largest remainders first (exact sum)."""
    weight = sum(max(0.0, v) for v in shares.values())
    if weight <= 0:
        return dict.fromkeys(shares, 0)
    exact = {k: total * max(0.0, v) / weight for k, v in shares.items()}
    parts = {k: math.floor(v) for k, v in exact.items()}
    left = total - sum(parts.values())
    for key in sorted(exact, key=lambda k: (-(exact[k] - parts[k]), k))[:left]:
        parts[key] += 1
    return parts


def demand_shares(jobs: Iterable[TraceJob]) -> dict[str, float]:
    """Each tenant's GPU-hours in the trace: the default basis of proportional quotas."""
    shares: dict[str, float] = {}
    for job in jobs:
        shares[job.tenant] = (
            shares.get(job.tenant, 0.0) + job.gpu_equivalents * job.run_time_s / 3600
        )
    return shares


def proportional_quotas(
    tenants: Sequence[str], shares: Mapping[str, float], cluster: ReplayCluster
) -> QuotaPlan:
    """Every product's GPUs split among ``tenants`` by ``shares`` (missing: no guarantee)."""
    basis = {t: shares.get(t, 0.0) for t in tenants}
    guaranteed: dict[tuple[str, str], int] = {}
    for product in cluster.products:
        for tenant, gpus in split(product.gpus, basis).items():
            guaranteed[(tenant, product.flavor)] = gpus
    return QuotaPlan(guaranteed)


def read_quotas(path: Path, cluster: ReplayCluster, tenants: Sequence[str]) -> QuotaPlan:
    """A quota file (see the module docstring). Unknown tenants or flavours, and guarantees
    that add up to more than a product's GPUs, are errors before anything runs."""
    known = set(tenants)
    header = next(iter(_header(path)), "")
    if header == "vc":
        shares: dict[str, float] = {}
        for line, row in csv_rows(path, ("vc", "node num")):
            shares[row["vc"]] = _whole(path, line, row, "node num", 0)
        return proportional_quotas(tenants, shares, cluster)
    guaranteed: dict[tuple[str, str], int] = {}
    weights: dict[str, float] = {}
    for line, row in csv_rows(path, ("tenant", "guaranteed")):
        tenant = row["tenant"]
        if tenant not in known:
            raise TraceError(
                path,
                line,
                "tenant",
                f"{tenant!r} submits nothing in the trace; the trace's tenants are "
                f"{', '.join(sorted(known)[:12])}",
            )
        flavor = row.get("flavor") or cluster.default_flavor
        if cluster.product(flavor) is None:
            raise TraceError(
                path,
                line,
                "flavor",
                f"{flavor!r} is not a product of the cluster "
                f"({', '.join(p.flavor for p in cluster.products)})",
            )
        guaranteed[(tenant, flavor)] = _whole(path, line, row, "guaranteed", 0)
        if row.get("weight"):
            try:
                weights[tenant] = float(row["weight"])
            except ValueError:
                weights[tenant] = -1.0
            if not 0 < weights[tenant] < 1e6:
                raise TraceError(path, line, "weight", "must be a number above 0, e.g. 1 or 2")
    for product in cluster.products:
        total = sum(g for (_, f), g in guaranteed.items() if f == product.flavor)
        if total > product.gpus:
            raise TraceError(
                path,
                None,
                "guaranteed",
                f"the guarantees of {product.flavor} add up to {total} GPUs, more than the "
                f"{product.gpus} the cluster has",
            )
    return QuotaPlan(guaranteed, weights)


def _header(path: Path) -> list[str]:
    if not path.is_file():
        raise TraceError(path, None, None, "no such file")
    with path.open(encoding="utf-8") as handle:
        return [name.strip() for name in handle.readline().split(",")]


def _whole(path: Path, line: int, row: dict[str, str], column: str, minimum: int) -> int:
    value = row.get(column, "")
    try:
        number = float(value)
    except ValueError:
        raise TraceError(path, line, column, f"{value!r} is not a whole number") from None
    if not number.is_integer() or number < minimum:
        raise TraceError(path, line, column, f"{value} must be a whole number >= {minimum}")
    return int(number)
