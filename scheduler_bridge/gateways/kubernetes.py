"""The Kubernetes gateway: the official ``kubernetes`` client against a real API server.

Each gateway owns its ApiClient and Configuration (never the client's global default),
so several clusters can be talked to from one process. Every call carries connect/read
timeouts; transient failures are retried a bounded number of times with exponential
backoff, re-reading the object each time, and what is left is turned into the domain
errors of :mod:`.errors` (:mod:`.kubernetes_calls`).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException

from . import kubernetes_cache, manifests
from .base import (
    DEVICE_CLASS_KIND,
    FIELD_MANAGER,
    JOB_KIND,
    MANAGED_BY_LABEL,
    POD_KIND,
    RESOURCE_CLAIM_KIND,
    RESOURCE_SLICE_KIND,
    ApplyResult,
    ClusterGateway,
    JobInfo,
    JobRef,
    KindRef,
    NodeInfo,
    PodInfo,
    Toleration,
    changed,
)
from .errors import (
    GatewayConfigError,
    GatewayError,
    JobStillStopping,
    ObjectConflict,
    ObjectMissing,
)
from .kubernetes_calls import RetryPolicy, run_with_retries
from .parsing import job_info, node_info
from .reconcile import get_path, plan_apply
from .validation import quota_hard_problems
from .watch_cache import CacheUnavailable, ClusterCache, WatchedCollection, shared_cache

T = TypeVar("T")
logger = logging.getLogger(__name__)
_APPLY = "application/apply-patch+yaml"
_MERGE = "application/merge-patch+json"
# Every write asks the API server to refuse unknown fields (400) rather than drop them
# silently (the default, Warn): a misspelt field is a bug to see, not a no-op.
_STRICT = "Strict"
# How long a read waits for a watched collection's first list (a failed list ends the
# wait at once; the read then lists by itself).
_FIRST_LIST_WAIT_S = 600.0
_USER_AGENT = "tidegate/0.1 (kubernetes-python)"
# Which kinds each API server serves, as discovery last said, and when: kubectl keeps
# its discovery cache for hours; a CRD installed meanwhile is seen within this time.
DISCOVERY_TTL_S = 300.0
_SERVED: dict[tuple[str, KindRef], tuple[bool, float]] = {}


class KubernetesGateway(ClusterGateway):
    """:class:`ClusterGateway` for a real cluster. Build it with :meth:`from_kubeconfig`,
    :meth:`from_environment` or :meth:`in_cluster`.

    With ``cache_key``, pods, nodes and Tidegate's ResourceQuotas are read from this
    process's watched cache of that key (:mod:`.watch_cache`), shared by every gateway
    built with the same key and kept current by watches, instead of being listed on
    every read; reads fall back to a list while the cache cannot answer.
    """

    # The client's connection pool and the API server take parallel writes.
    write_concurrency = 8

    @property
    def compares_locally(self) -> bool:  # type: ignore[override]
        # Watched quotas answer what an apply compares; without them it reads first.
        return self.cache is not None

    def __init__(
        self,
        api_client: k8s.ApiClient,
        *,
        retry: RetryPolicy | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        field_manager: str = FIELD_MANAGER,
        cache_key: str | None = None,
        watch_timeout_s: float = 300.0,
        job_settle_timeout_s: float = 15.0,
    ) -> None:
        self._api = api_client
        self._settle_timeout_s = job_settle_timeout_s
        self._core = k8s.CoreV1Api(api_client)
        self._batch = k8s.BatchV1Api(api_client)
        self._custom = k8s.CustomObjectsApi(api_client)
        self._retry = retry or RetryPolicy()
        self._timeout = (connect_timeout, read_timeout)
        self._manager = field_manager
        self.server = api_client.configuration.host
        self.cache: ClusterCache | None = None
        if cache_key:
            configuration = api_client.configuration
            self.cache = shared_cache(
                cache_key,
                lambda: kubernetes_cache.cluster_cache(
                    _api_client(configuration),
                    connect_timeout=connect_timeout,
                    read_timeout=read_timeout,
                    watch_timeout_s=watch_timeout_s,
                ),
                replacing=cache_key.split(":", 1)[0] + ":",
            )

    # --- construction ----------------------------------------------------------------

    @classmethod
    def from_kubeconfig(
        cls, path: str | os.PathLike[str], context: str | None = None, **settings: Any
    ) -> KubernetesGateway:
        """Connect with a kubeconfig file and context (its current context if None).
        Raises GatewayConfigError naming the path or context when they are unusable."""
        path = os.path.expanduser(os.fspath(path))
        if not os.path.isfile(path):
            raise GatewayConfigError(f"kubeconfig file {path} does not exist (or is not a file)")
        try:
            contexts, current = k8s_config.list_kube_config_contexts(config_file=path)
        except (ConfigException, OSError, yaml.YAMLError, KeyError, TypeError) as exc:
            raise GatewayConfigError(f"kubeconfig file {path} cannot be read: {exc}") from exc
        names = [c.get("name") for c in contexts or []]
        if context is not None and context not in names:
            raise GatewayConfigError(
                f"context {context!r} is not in kubeconfig {path} "
                f"(it has: {', '.join(map(str, names)) or 'no contexts'})"
            )
        if context is None and not current:
            raise GatewayConfigError(f"kubeconfig {path} has no current-context; name one")
        configuration = k8s.Configuration()
        try:
            k8s_config.load_kube_config(
                config_file=path,
                context=context,
                client_configuration=configuration,
                persist_config=False,
            )
        except (ConfigException, OSError, ValueError, KeyError) as exc:
            raise GatewayConfigError(
                f"kubeconfig {path}, context {context or current.get('name')!r}: {exc}"
            ) from exc
        return cls(_api_client(configuration), **settings)

    @classmethod
    def from_environment(
        cls, variable: str, context: str | None = None, **settings: Any
    ) -> KubernetesGateway:
        """Connect with the kubeconfig whose path is in environment variable ``variable``."""
        path = os.environ.get(variable)
        if not path:
            raise GatewayConfigError(
                f"environment variable {variable} is not set; it must hold a kubeconfig path"
            )
        return cls.from_kubeconfig(path, context, **settings)

    @classmethod
    def in_cluster(cls, **settings: Any) -> KubernetesGateway:
        """Connect with the service account of the pod Tidegate runs in."""
        configuration = k8s.Configuration()
        try:
            k8s_config.load_incluster_config(client_configuration=configuration)
        except ConfigException as exc:
            raise GatewayConfigError(
                f"no in-cluster service account ({exc}); run inside a pod or use a kubeconfig"
            ) from exc
        return cls(_api_client(configuration), **settings)

    def close(self) -> None:
        self._api.close()

    # --- reads -----------------------------------------------------------------------

    def list_nodes(self) -> list[NodeInfo]:
        nodes = self._cached_values("nodes")
        if nodes is None:
            nodes = self._run("list nodes", lambda: self._list_as(node_info, self._core.list_node))
        return sorted(nodes, key=lambda n: n.name)

    def list_gpu_pods(self) -> list[PodInfo]:
        pods = self._pods_of_interest()
        return sorted(self._with_claimed_gpus(pods), key=lambda p: (p.namespace, p.name))

    def list_claiming_pods(self) -> list[PodInfo]:
        return [p for p in self._pods_of_interest() if p.has_claims]

    def _pods_of_interest(self) -> list[PodInfo]:
        """Pods that ask for GPUs or name ResourceClaims (kubernetes_cache.gpu_pod)."""
        pods = self._cached_values("pods")
        if pods is None:
            pods = self._run(
                "list pods",
                lambda: self._list_as(
                    kubernetes_cache.gpu_pod, self._core.list_pod_for_all_namespaces
                ),
            )
        return pods

    def list_resource_claims(self) -> list[dict[str, Any]] | None:
        if not self.serves(RESOURCE_CLAIM_KIND):
            return None
        claims = self._cached_values("resourceclaims")
        return claims if claims is not None else super().list_resource_claims()

    def list_device_classes(self) -> list[dict[str, Any]] | None:
        if not self.serves(DEVICE_CLASS_KIND):
            return None
        classes = self._cached_values("deviceclasses")
        if classes is None:
            return super().list_device_classes()
        return sorted(classes, key=lambda o: o["metadata"]["name"])

    def list_resource_slices(self) -> list[dict[str, Any]] | None:
        if not self.serves(RESOURCE_SLICE_KIND):
            return None  # (asked of discovery once in DISCOVERY_TTL_S)
        slices = self._cached_values("resourceslices")
        if slices is None:
            return super().list_resource_slices()
        return sorted(slices, key=lambda o: o["metadata"]["name"])

    def _collection(self, name: str) -> WatchedCollection[Any] | None:
        return self.cache[name] if self.cache is not None else None

    def _cached_values(self, name: str) -> list[Any] | None:
        """The cached collection's values, or None when there is no cache or it
        cannot answer (then the caller lists, and the cache says why in its health)."""
        collection = self._collection(name)
        if collection is None:
            return None
        try:
            return collection.values(wait_s=_FIRST_LIST_WAIT_S)
        except CacheUnavailable as exc:
            logger.warning("reading %s from %s directly: %s", name, self.server, exc)
            return None

    def list_namespaces(self) -> list[str]:
        items = self._run("list namespaces", lambda: self._list(self._core.list_namespace))
        return sorted(i["metadata"]["name"] for i in items)

    def list_jobs(
        self, label_selector: str | None = None, *, namespace: str | None = None
    ) -> list[JobInfo]:
        selector = {"label_selector": label_selector} if label_selector else {}
        if namespace:
            items = self._run(
                f"list jobs in {namespace}",
                lambda: self._list(self._batch.list_namespaced_job, namespace, **selector),
            )
        else:
            items = self._run(
                "list jobs",
                lambda: self._list(self._batch.list_job_for_all_namespaces, **selector),
            )
        return sorted((job_info(i) for i in items), key=lambda j: (j.namespace, j.name))

    # --- workload objects of any kind -------------------------------------------------

    def serves(self, kind: KindRef) -> bool:
        if kind in (JOB_KIND, POD_KIND):
            return True  # built in
        key = (self.server, kind)
        known = _SERVED.get(key)
        if known is not None and time.monotonic() - known[1] < DISCOVERY_TTL_S:
            return known[0]

        def attempt() -> bool:
            try:
                found = self._raw(self._custom.get_api_resources, kind.group, kind.version)
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            return any(r.get("name") == kind.plural for r in found.get("resources") or [])

        served = self._run(f"discover {kind.plural}.{kind.group}", attempt)
        _SERVED[key] = (served, time.monotonic())
        return served

    def watch_labelled(
        self,
        kinds: Sequence[KindRef],
        label_selector: str,
        project: Callable[[KindRef, Mapping[str, Any]], Any],
        on_change: Callable[[], None],
    ) -> ClusterCache:
        # on a client of their own: the watches outlive this gateway's requests
        return kubernetes_cache.labelled_collections(
            _api_client(self._api.configuration),
            kinds,
            label_selector,
            project,
            on_change,
            connect_timeout=self._timeout[0],
            read_timeout=self._timeout[1],
        )

    def list_objects(self, kind: KindRef, label_selector: str) -> list[dict[str, Any]]:
        def attempt() -> list[dict[str, Any]]:
            if kind == POD_KIND:
                return self._list(
                    self._core.list_pod_for_all_namespaces, label_selector=label_selector
                )
            try:
                return self._list(
                    self._custom.list_cluster_custom_object,
                    kind.group,
                    kind.version,
                    kind.plural,
                    label_selector=label_selector,
                )
            except ApiException as exc:
                if exc.status == 404:
                    _SERVED[(self.server, kind)] = (False, time.monotonic())
                    raise ObjectMissing(kind.kind, kind.plural) from exc
                raise

        items = self._run(f"list {kind.plural}.{kind.group}", attempt)
        return sorted(
            items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        )

    def update_object(
        self,
        kind: KindRef,
        namespace: str,
        name: str,
        change: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> dict[str, Any]:
        read: Callable[..., Any]
        replace: Callable[..., Any]
        if kind == POD_KIND:
            where: tuple[str, ...] = (name, namespace)
            read, replace = self._core.read_namespaced_pod, self._core.replace_namespaced_pod
        else:
            where = (kind.group, kind.version, namespace, kind.plural, name)
            read = self._custom.get_namespaced_custom_object
            replace = self._custom.replace_namespaced_custom_object

        def attempt() -> dict[str, Any]:
            live = self._read_or_none(read, *where)
            if live is None:
                raise ObjectMissing(kind.kind, name, namespace)
            desired = changed(kind, namespace, name, change, live)
            if desired == live:
                return live
            # the resourceVersion read makes the replace a compare-and-swap: a write in
            # between answers 409 and this attempt runs again from the read
            desired.setdefault("metadata", {})["resourceVersion"] = live["metadata"][
                "resourceVersion"
            ]
            return self._raw(
                replace,
                *where,
                desired,
                field_manager=self._manager,
                field_validation=_STRICT,
            )

        return self._run(
            f"update {kind.kind} {namespace}/{name}",
            attempt,
            namespace=namespace,
            retry_conflict=True,
        )

    def delete_pod(self, namespace: str, name: str, grace_s: int | None = None) -> bool:
        def attempt() -> bool:
            try:
                self._call(
                    self._core.delete_namespaced_pod,
                    name,
                    namespace,
                    grace_period_seconds=grace_s,
                )
            except ApiException as exc:
                if exc.status == 404:
                    return False
                raise
            return True

        return self._run(f"delete pod {namespace}/{name}", attempt, namespace=namespace)

    # --- idempotent applies ----------------------------------------------------------

    def apply_resource_quota(
        self,
        namespace: str,
        name: str,
        hard: Mapping[str, str],
        labels: Mapping[str, str],
        *,
        expect_existing: bool = False,
    ) -> ApplyResult:
        # A real API server answers a server-side apply with a value that is no quantity
        # with 500 (the object cannot be converted), which reads as an outage and would
        # be retried: refuse it here, naming the value, as a create would (422).
        problems = quota_hard_problems(hard)
        if problems:
            raise GatewayError(f'ResourceQuota "{name}" is invalid: ' + "; ".join(problems))
        desired = manifests.resource_quota(namespace, hard, labels, name)
        cached = self._collection("resourcequotas")
        selected = labels.get(MANAGED_BY_LABEL) == "tidegate"
        return self._apply(
            desired,
            ("spec", "hard"),
            read=self._core.read_namespaced_resource_quota,
            patch=self._core.patch_namespaced_resource_quota,
            expect_existing=expect_existing,
            show_values=True,
            cached=cached if selected else None,
        )

    def apply_config_map(
        self,
        namespace: str,
        name: str,
        data: Mapping[str, str],
        labels: Mapping[str, str],
        *,
        expect_existing: bool = False,
    ) -> ApplyResult:
        desired = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
            "data": dict(data),
        }
        return self._apply(
            desired,
            ("data",),
            read=self._core.read_namespaced_config_map,
            patch=self._core.patch_namespaced_config_map,
            expect_existing=expect_existing,
            show_values=False,
        )

    def _apply(
        self,
        desired: dict[str, Any],
        content_path: tuple[str, ...],
        *,
        read: Callable[..., Any],
        patch: Callable[..., Any],
        expect_existing: bool,
        show_values: bool,
        cached: WatchedCollection[Any] | None = None,
    ) -> ApplyResult:
        name, namespace = desired["metadata"]["name"], desired["metadata"]["namespace"]
        what = f"apply {desired['kind']} {namespace}/{name}"
        tries = 0

        def attempt() -> ApplyResult:
            nonlocal tries
            tries += 1
            # The watched copy spares a read per object per sync; a retry (after a
            # conflict) and an object the cache does not hold read the server.
            live = self._cached_object(cached, f"{namespace}/{name}") if tries == 1 else None
            if live is None:
                live = self._read_or_none(read, name, namespace)
            plan = plan_apply(
                live,
                desired,
                content_path,
                expect_existing=expect_existing,
                show_values=show_values,
            )
            if not plan.write:
                return ApplyResult("unchanged")
            applied: dict[str, Any] = self._raw(
                patch,
                name,
                namespace,
                plan.body,
                field_manager=self._manager,
                field_validation=_STRICT,
                force=True,
                _content_type=_APPLY,
            )
            # Server-side apply leaves keys that another field manager added (e.g. by
            # `kubectl edit`); the quota must be exactly what Tidegate says, so drop them.
            wanted = get_path(desired, content_path)
            leftovers = [k for k in get_path(applied, content_path) if k not in wanted]
            if leftovers:
                removal: dict[str, Any] = {k: None for k in leftovers}
                for key in reversed(content_path):
                    removal = {key: removal}
                applied = self._raw(
                    patch,
                    name,
                    namespace,
                    removal,
                    field_manager=self._manager,
                    field_validation=_STRICT,
                    _content_type=_MERGE,
                )
            if cached is not None:
                cached.observe(applied)
            return ApplyResult("created" if plan.create else "updated", plan.drift)

        return self._run(what, attempt, namespace=namespace, retry_conflict=True)

    def delete_resource_quota(self, namespace: str, name: str) -> bool:
        def attempt() -> bool:
            cached = self._collection("resourcequotas")
            try:
                self._call(self._core.delete_namespaced_resource_quota, name, namespace)
            except ApiException as exc:
                if exc.status == 404:
                    if cached is not None:
                        cached.forget(f"{namespace}/{name}")
                    return False
                raise
            if cached is not None:
                cached.forget(f"{namespace}/{name}")
            return True

        return self._run(f"delete ResourceQuota {namespace}/{name}", attempt)

    def resource_quota_limits(self, label_selector: str) -> dict[tuple[str, str], dict[str, str]]:
        quotas = None
        if label_selector == kubernetes_cache.QUOTA_SELECTOR:
            quotas = self._cached_values("resourcequotas")
        if quotas is None:
            quotas = self._run(
                "list resourcequotas",
                lambda: self._list(
                    self._core.list_resource_quota_for_all_namespaces,
                    label_selector=label_selector,
                ),
            )
        return {
            (q["metadata"]["namespace"], q["metadata"]["name"]): dict(
                (q.get("spec") or {}).get("hard") or {}
            )
            for q in quotas
        }

    # --- nodes -----------------------------------------------------------------------

    def set_node_labels(self, node: str, labels: Mapping[str, str | None]) -> bool:
        def attempt() -> bool:
            live = self._read_or_none(self._core.read_node, node)
            if live is None:
                raise ObjectMissing("Node", node)
            current = live["metadata"].get("labels") or {}
            changes = {k: v for k, v in labels.items() if current.get(k) != v}
            if not changes:
                return False
            body = manifests.node_label_patch(changes)
            written = self._raw(
                self._core.patch_node,
                node,
                body,
                field_manager=self._manager,
                field_validation=_STRICT,
                _content_type=_MERGE,
            )
            nodes = self._collection("nodes")
            if nodes is not None:
                nodes.observe(written)
            return True

        return self._run(f"label node {node}", attempt)

    # --- jobs ------------------------------------------------------------------------

    def admit_job(
        self,
        namespace: str,
        name: str,
        node_selector: Mapping[str, str],
        tolerations: Sequence[Toleration],
        node_names: Sequence[str] | None = None,
    ) -> JobInfo:
        def admission(job: dict[str, Any]) -> dict[str, Any]:
            return _job_patch(
                manifests.job_admission_patch, job, node_selector, tolerations, node_names
            )

        def attempt() -> JobInfo:
            job = self._read_job(namespace, name)
            patch = admission(job)
            if not job["spec"].get("suspend"):
                if patch:  # running, but not the way this admission would run it
                    raise ObjectConflict(
                        f"Job {namespace}/{name} is already running"
                        + (" with another placement" if job_info(job).admitted else "")
                        + "; suspend it before admitting it again",
                        retryable=False,
                    )
                return job_info(job)
            return self._patch_template(namespace, name, job, patch, admission)

        return self._run(
            f"admit Job {namespace}/{name}", attempt, namespace=namespace, retry_conflict=True
        )

    def suspend_job(self, namespace: str, name: str) -> JobInfo:
        def stop() -> None:
            job = self._read_job(namespace, name)
            if not job["spec"].get("suspend"):
                self._patch_job(namespace, name, manifests.job_suspend_patch(job))

        def restoring(job: dict[str, Any]) -> dict[str, Any]:
            return _job_patch(manifests.job_restore_patch, job)

        def restore() -> JobInfo:
            job = self._read_job(namespace, name)
            patch = restoring(job)
            if not patch:
                return job_info(job)
            return self._patch_template(namespace, name, job, patch, restoring)

        what = f"suspend Job {namespace}/{name}"
        self._run(what, stop, namespace=namespace, retry_conflict=True)
        try:
            return self._run(what, restore, namespace=namespace, retry_conflict=True)
        except JobStillStopping as error:
            # Suspended all the same: its pods go, and the next admission writes its
            # placement from the original kept in the annotation, whatever is there now.
            logger.warning("%s: the placement stays until it is admitted again (%s)", what, error)
            return job_info(self._read_job(namespace, name))

    def record_job_event(
        self, job: JobRef, reason: str, message: str, *, warning: bool = False
    ) -> None:
        body = manifests.job_event(
            job.namespace,
            job.name,
            job.uid,
            reason,
            message,
            warning=warning,
            at=datetime.now(UTC),
            suffix=uuid.uuid4().hex[:16],
            kind=job.kind,
            api_version=job.api_version,
        )

        def attempt() -> None:
            self._call(
                self._core.create_namespaced_event, job.namespace, body, field_validation=_STRICT
            )

        self._run(f"record an Event on Job {job.namespace}/{job.name}", attempt)

    def _read_job(self, namespace: str, name: str) -> dict[str, Any]:
        job = self._read_or_none(self._batch.read_namespaced_job, name, namespace)
        if job is None:
            raise ObjectMissing("Job", name, namespace)
        return job

    def _patch_template(
        self,
        namespace: str,
        name: str,
        job: dict[str, Any],
        patch: dict[str, Any],
        build: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> JobInfo:
        """Apply ``patch`` (built from ``job`` by ``build``) to a suspended Job; when it
        changes the pod template of a Job that has run, clear ``startTime`` first and
        build the patch again from the Job as it is then."""
        if _scheduling_changes(patch) and _active_pods(job):
            job = self._wait_until_pods_stopped(namespace, name, job)
            patch = build(job)
        if _scheduling_changes(patch) and _started(job):
            job = self._clear_start_time(namespace, name, job)
            patch = build(job)
        return job_info(self._patch_job(namespace, name, patch))

    def _wait_until_pods_stopped(
        self, namespace: str, name: str, job: dict[str, Any]
    ) -> dict[str, Any]:
        """The Job as soon as the Job controller has counted its pods stopped.

        Kubernetes lets the template of a suspended Job change only once its
        ``status.active`` is 0 (``shouldAllowMutablePodTemplate`` in
        ``pkg/registry/batch/job/strategy.go``, 1.36 and later): right after ``suspend``
        is set, the controller has yet to delete the pods and count them, and a template
        write in between is refused (422, ``field is immutable``)."""
        deadline = time.monotonic() + self._settle_timeout_s
        while _active_pods(job) and time.monotonic() < deadline:
            time.sleep(0.1)
            job = self._read_job(namespace, name)
        if _active_pods(job):
            raise JobStillStopping(
                f"Job {namespace}/{name} still has {_active_pods(job)} active pods "
                f"{self._settle_timeout_s:.0f} s after it was suspended, and Kubernetes keeps "
                "its pod template fixed until the Job controller has stopped them (is "
                "kube-controller-manager running?)"
            )
        return job

    def _clear_start_time(self, namespace: str, name: str, job: dict[str, Any]) -> dict[str, Any]:
        """Clear ``status.startTime`` of a suspended Job through the ``jobs/status``
        subresource, as Kueue does before it changes scheduling directives.

        Kubernetes lets a Job's node selector, tolerations and node affinity change only
        while it is suspended and has no start time (``validationOptionsForJob`` in
        ``pkg/registry/batch/job/strategy.go``); the Job controller sets ``startTime``
        whenever a Job resumes and never clears it (``syncJob`` in
        ``pkg/controller/job/job_controller.go``), so a Job that ever ran would refuse
        every new placement. The status write is allowed because the Job is suspended
        (``RejectStartTimeUpdateForUnsuspendedJob`` in
        ``pkg/apis/batch/validation/validation.go``); the resourceVersion makes it a
        compare-and-swap, so a resume in between is a 409 and the caller re-reads.
        Returns the Job as stored after the write."""
        body = {
            "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
            "status": {"startTime": None},
        }
        return self._raw(
            self._batch.patch_namespaced_job_status,
            name,
            namespace,
            body,
            field_manager=self._manager,
            field_validation=_STRICT,
            _content_type=_MERGE,
        )

    def _patch_job(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self._raw(
            self._batch.patch_namespaced_job,
            name,
            namespace,
            patch,
            field_manager=self._manager,
            field_validation=_STRICT,
            _content_type=_MERGE,
        )

    # --- plumbing --------------------------------------------------------------------

    def _call(self, method: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return method(*args, _request_timeout=self._timeout, **kwargs)

    def _raw(self, method: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The call's answer as decoded JSON: the client's models cost more than the
        call itself (a write's answer would be built into a model, then back)."""
        return kubernetes_cache.decode(
            method(*args, _request_timeout=self._timeout, _preload_content=False, **kwargs)
        )

    def _read_or_none(self, read: Callable[..., Any], *args: Any) -> dict[str, Any] | None:
        try:
            return self._raw(read, *args)
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _run(
        self,
        what: str,
        operation: Callable[[], T],
        *,
        namespace: str | None = None,
        retry_conflict: bool = False,
    ) -> T:
        return run_with_retries(
            what,
            operation,
            retry=self._retry,
            server=self.server,
            namespace=namespace,
            retry_conflict=retry_conflict,
        )

    def _cached_object(
        self, cached: WatchedCollection[Any] | None, key: str
    ) -> dict[str, Any] | None:
        if cached is None:
            return None
        try:
            return cached.get(key, wait_s=_FIRST_LIST_WAIT_S)
        except CacheUnavailable:
            return None

    def _list(self, method: Callable[..., Any], *args: Any, **selectors: str) -> list[dict]:
        return self._list_as(lambda item: item, method, *args, **selectors)

    def _list_as(
        self,
        project: Callable[[dict[str, Any]], T | None],
        method: Callable[..., Any],
        *args: Any,
        **selectors: str,
    ) -> list[T]:
        """Every object of a list, as ``project`` makes it (None: left out). Pages
        through big lists and projects each page as it comes, so the answer never holds
        every pod of a cluster at once; decodes the raw JSON (the client's models cost
        more than the transfer)."""
        found: list[T] = []
        token: str | None = None
        while True:
            page = kubernetes_cache.list_raw(
                method, *args, timeout=self._timeout, continue_token=token, **selectors
            )
            for item in page.get("items") or []:
                value = project(item)
                if value is not None:
                    found.append(value)
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return found


def _api_client(configuration: k8s.Configuration) -> k8s.ApiClient:
    # urllib3 would otherwise retry timeouts on its own, multiplying our timeouts by its
    # retry count behind our back; retries are ours, bounded and logged in one place.
    configuration.retries = False
    # A proxy taken from the environment is looked up again every time the host is set,
    # which the kubeconfig's token refresh does before every request; look it up once.
    configuration.proxy = configuration.proxy
    api_client = k8s.ApiClient(configuration=configuration)
    api_client.user_agent = _USER_AGENT
    return api_client


def _job_patch(builder: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
    try:
        return builder(*args)
    except ValueError as exc:  # an unreadable original-scheduling annotation
        raise GatewayError(str(exc)) from exc


def _started(job: Mapping[str, Any]) -> bool:
    return bool((job.get("status") or {}).get("startTime"))


def _active_pods(job: Mapping[str, Any]) -> int:
    """Pods the Job controller counts as running for a Job (0 for a Job it has stopped)."""
    return int((job.get("status") or {}).get("active") or 0)


def _scheduling_changes(patch: Mapping[str, Any]) -> bool:
    """Whether a Job patch touches the pod template (its scheduling directives)."""
    return "template" in (patch.get("spec") or {})


__all__ = ["KubernetesGateway", "RetryPolicy"]
