"""A local HTTP server speaking enough of the Kubernetes REST API for the real client.

Serves core/v1 namespaces, nodes, pods, configmaps, resourcequotas and batch/v1 jobs:
list (label and field selectors, limit/continue), watch (from a resourceVersion, with
bookmarks, 410 Gone past the history), get, create, update, JSON and strategic merge
patch, server-side apply, delete; plus /version and discovery. Test
hooks inject failures and delays, count requests by verb, and reach into the stored
objects to seed them or change them "by hand".
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import threading
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from . import crds, fieldmanager
from .jsoncopy import clone
from .rbac import Rules
from .routing import Route, route_request
from .schema import refuse_unknown_fields
from .store import ApiError, Store, now_stamp
from .strategic import strategic_merge_patch
from .watch import WatchRequest, stream_watch, watch_request

WRITE_VERBS = ("create", "update", "patch", "apply", "delete")
DEFAULT_TOKEN = "tidegate-test-token"
RBAC_USER = "system:serviceaccount:tidegate-system:tidegate"


@dataclass
class RequestRecord:
    method: str
    path: str
    verb: str
    status: int = 0


@dataclass
class _Rule:
    pattern: re.Pattern[str]
    method: str | None
    remaining: int | None  # None: forever
    status: int = 500
    seconds: float = 0.0
    retry_after: int | None = None

    def matches(self, method: str, path: str) -> bool:
        return (
            (self.remaining is None or self.remaining > 0)
            and (self.method is None or self.method == method)
            and bool(self.pattern.search(path))
        )


class FakeKubeApi:
    """The fake API server. ``start()`` binds 127.0.0.1 on a free port; ``url`` is the
    address to put in a kubeconfig; requests need ``Authorization: Bearer <token>``.

    Test hooks:

    * failures and slowness: :meth:`fail_next` (N answers with a status, optionally
      ``Retry-After``), :meth:`delay` (hold answers), :meth:`after_request` (run code
      between a client's read and its write), :meth:`clear_faults`;
    * accounting: :meth:`count` by verb (list, get, create, update, patch, apply,
      delete), :meth:`write_count`, :meth:`reset_counts`, the ``requests`` log;
    * stored objects: :meth:`get_object`, :meth:`objects`, :meth:`put_object` and
      :meth:`edit_object` (by hand: no validation, no ownership change),
      :meth:`delete_object`, :meth:`create_object` (as ``kubectl create`` would), and
      seeding shortcuts :meth:`add_namespace`, :meth:`add_node`, :meth:`add_pod`;
    * the Job controller on demand: :meth:`run_job`, :meth:`complete_job` (suspension
      itself is handled on every write, as the real controller would).
    """

    def __init__(self, token: str = DEFAULT_TOKEN) -> None:
        self.store = Store()
        self.token = token
        self.requests: list[RequestRecord] = []
        self.rbac: Rules | None = None  # enforce_rbac
        self.refused: list[str] = []  # pod creates ResourceQuota admission refused
        # (kind, namespace, name) -> gracePeriodSeconds its delete asked for (None: default)
        self.delete_grace: dict[tuple[str, str | None, str], int | None] = {}
        self.webhooks: list[tuple[str, str, bool, float]] = []  # register_mutating_webhook
        self.rbac_user = RBAC_USER
        self.counts: Counter[str] = Counter()
        # How often an open watch that asked for bookmarks gets one: the API server's
        # cacher sends one a minute (bookmarkFrequency in staging/src/k8s.io/apiserver/
        # pkg/storage/cacher/cacher.go) and one just before the watch times out.
        self.bookmark_interval_s = 60.0
        self.open_watches = 0
        self.watch_generation = 0  # drop_watches() moves it; open watches then end
        self._faults: list[_Rule] = []
        self._delays: list[_Rule] = []
        self._after: list[tuple[_Rule, Callable[[FakeKubeApi], Any]]] = []
        self._hooks_lock = threading.Lock()
        self.stopping = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle -------------------------------------------------------------------

    def start(self) -> FakeKubeApi:
        api = self

        class Handler(_Handler):
            fake = api

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        # A short poll interval makes shutdown() (every test's teardown) quick.
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()  # wakes delayed handlers so they finish at once
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeKubeApi:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self._httpd is not None, "start() the server first"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # --- fault injection and request accounting --------------------------------------

    def fail_next(
        self,
        count: int,
        path_pattern: str = ".*",
        *,
        status: int = 500,
        method: str | None = None,
        retry_after: int | None = None,
    ) -> None:
        """Answer the next ``count`` requests whose path matches the regex with
        ``status`` (a Status body, like an apiserver or a proxy in front of it)."""
        with self._hooks_lock:
            self._faults.append(
                _Rule(re.compile(path_pattern), method, count, status, retry_after=retry_after)
            )

    def delay(
        self,
        seconds: float,
        path_pattern: str = ".*",
        *,
        count: int | None = None,
        method: str | None = None,
    ) -> None:
        """Hold matching requests ``seconds`` before answering (all of them unless
        ``count`` is given)."""
        with self._hooks_lock:
            self._delays.append(_Rule(re.compile(path_pattern), method, count, seconds=seconds))

    def after_request(
        self,
        callback: Callable[[FakeKubeApi], Any],
        path_pattern: str = ".*",
        *,
        method: str | None = None,
        count: int | None = 1,
    ) -> None:
        """Run ``callback(api)`` once a matching request has been served and before its
        answer is sent: the way to make another writer act "between" a client's read
        and its write."""
        with self._hooks_lock:
            self._after.append((_Rule(re.compile(path_pattern), method, count), callback))

    def drop_watches(self, meanwhile: Callable[[FakeKubeApi], Any] | None = None) -> None:
        """End every open watch at once, as a restarting API server or a broken
        connection would; ``meanwhile(api)`` runs before any watch can send again
        (under the store's lock), e.g. to change objects and compact the history."""
        with self.store.lock:
            self.watch_generation += 1
            if meanwhile is not None:
                meanwhile(self)
            self.store.changed.notify_all()

    def clear_faults(self) -> None:
        with self._hooks_lock:
            self._faults.clear()
            self._delays.clear()
            self._after.clear()

    def count(self, *verbs: str) -> int:
        """Requests received with any of ``verbs`` (all requests when none given)."""
        with self._hooks_lock:
            return sum(self.counts[v] for v in verbs) if verbs else sum(self.counts.values())

    def write_count(self) -> int:
        return self.count(*WRITE_VERBS)

    def reset_counts(self) -> None:
        with self._hooks_lock:
            self.counts.clear()
            self.requests.clear()

    # --- direct access to stored objects (seeding, hand edits) -----------------------

    def get_object(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        with self.store.lock:
            obj = self.store.objects.get(self.store.key(self.store.by_kind[kind], namespace, name))
            return clone(obj)

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        resource = self.store.by_kind[kind]
        with self.store.lock:
            return [clone(o) for o in self.store.of(resource.plural, namespace)]

    def create_object(
        self, obj: Mapping[str, Any], manager: str = "kubectl-create"
    ) -> dict[str, Any]:
        """Create ``obj`` with full API semantics (defaults, validation, ownership), as a
        user's ``kubectl create`` would."""
        resource = self.store.by_kind[obj["kind"]]
        namespace = obj.get("metadata", {}).get("namespace")
        body = self._mutate(resource, namespace, dict(obj))  # mutating admission
        return self.store.create(resource, namespace, body, manager)

    def put_object(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as given, bypassing validation and field ownership."""
        return self.store.put_raw(dict(obj))

    def edit_object(
        self, kind: str, namespace: str | None, name: str, edit: Callable[[dict[str, Any]], Any]
    ) -> dict[str, Any]:
        """Change a stored object "by hand" (resourceVersion moves, owners do not)."""
        with self.store.lock:
            obj = self.get_object(kind, namespace, name)
            if obj is None:
                raise KeyError(f"{kind} {namespace}/{name} is not stored")
            edit(obj)
            return self.store.put_raw(obj)

    def delete_object(self, kind: str, namespace: str | None, name: str) -> bool:
        return self.store.remove_raw(kind, namespace, name)

    def add_namespace(self, name: str, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
        meta = {"name": name, "labels": {"kubernetes.io/metadata.name": name, **(labels or {})}}
        return self.put_object(
            {
                "kind": "Namespace",
                "metadata": meta,
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            }
        )

    def add_node(
        self,
        name: str,
        *,
        labels: Mapping[str, str] | None = None,
        allocatable: Mapping[str, str | int] | None = None,
        capacity: Mapping[str, str | int] | None = None,
        taints: Sequence[Mapping[str, str]] = (),
        unschedulable: bool = False,
    ) -> dict[str, Any]:
        alloc = {
            k: str(v)
            for k, v in (allocatable or {"cpu": "64", "memory": "512Gi", "pods": "110"}).items()
        }
        spec: dict[str, Any] = {}
        if taints:
            spec["taints"] = [dict(t) for t in taints]
        if unschedulable:
            spec["unschedulable"] = True
        status = {
            "allocatable": alloc,
            "capacity": {k: str(v) for k, v in (capacity or alloc).items()},
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        labels = {"kubernetes.io/hostname": name, **(labels or {})}
        return self.put_object(
            {
                "kind": "Node",
                "metadata": {"name": name, "labels": labels},
                "spec": spec,
                "status": status,
            }
        )

    def add_pod(
        self,
        namespace: str,
        name: str,
        *,
        requests: Mapping[str, str | int] | None = None,
        node_name: str | None = None,
        phase: str = "Running",
        labels: Mapping[str, str] | None = None,
        job: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        amounts = {k: str(v) for k, v in (requests or {}).items()}
        container: dict[str, Any] = {"name": "main", "image": "busybox"}
        if amounts:
            container["resources"] = {"requests": amounts, "limits": dict(amounts)}
        meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
        if job is not None:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "batch/v1",
                    "kind": "Job",
                    "name": job["metadata"]["name"],
                    "uid": job["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        spec: dict[str, Any] = {"containers": [container], "restartPolicy": "Never"}
        if node_name:
            spec["nodeName"] = node_name
        status: dict[str, Any] = {"phase": phase}
        if phase != "Pending":
            status["startTime"] = now_stamp()
        if phase in ("Succeeded", "Failed"):
            status["containerStatuses"] = [_terminated(phase)]
        return self.put_object({"kind": "Pod", "metadata": meta, "spec": spec, "status": status})

    # --- the Job controller, on demand -----------------------------------------------

    def run_job(self, namespace: str, name: str) -> list[dict[str, Any]]:
        """Start the pods of an unsuspended Job (one per ``parallelism``), on the nodes
        its template pins it to, or else the first nodes matching its nodeSelector."""
        job = self.get_object("Job", namespace, name)
        if job is None or job["spec"].get("suspend"):
            raise ValueError(f"Job {namespace}/{name} is missing or suspended")
        template = job["spec"]["template"]
        nodes = _candidate_nodes(template.get("spec") or {}, self.objects("Node"))
        pods = []
        spec = job["spec"]
        # at most parallelism, never more than the completions to go (manageJob in
        # pkg/controller/job/job_controller.go)
        running = int(spec.get("parallelism", 1))
        if spec.get("completions") is not None:
            running = min(running, int(spec["completions"]))
        for index in range(running):
            pod_spec = clone(template.get("spec") or {})
            # the Job controller's pod creates go through ResourceQuota admission: a pod
            # that would pass a quota is refused (403) and not created
            refusal = self.store.quota_refusal(namespace, f"{name}-{index}", pod_spec)
            if refusal is not None:
                self.refused.append(refusal.message)
                break
            node = nodes[index % len(nodes)] if nodes else None
            pod = self.add_pod(
                namespace,
                f"{name}-{uuid.uuid4().hex[:5]}",
                node_name=node,
                phase="Running" if node else "Pending",
                job=job,
                labels=(template.get("metadata") or {}).get("labels"),
            )
            pod["spec"] = {**pod_spec, **({"nodeName": node} if node else {})}
            pods.append(self.put_object(pod))
        self.edit_object("Job", namespace, name, lambda j: j["status"].update(active=len(pods)))
        return pods

    def complete_pods(self, namespace: str, name: str, count: int) -> dict[str, Any]:
        """``count`` running pods of the Job succeed, and its status counts them
        (``succeeded`` up, ``active`` down), as the Job controller records finished pods;
        the Job itself completes only once all its completions are in (complete_job)."""
        job = self.get_object("Job", namespace, name)
        assert job is not None
        running = [p for p in self.store.owned_pods(job) if p["status"].get("phase") == "Running"]
        for pod in sorted(running, key=lambda p: p["metadata"]["name"])[:count]:
            self.edit_object(
                "Pod",
                namespace,
                pod["metadata"]["name"],
                lambda p: p["status"].update(
                    phase="Succeeded", containerStatuses=[_terminated("Succeeded")]
                ),
            )

        def count_them(j: dict[str, Any]) -> None:
            status = j["status"]
            status["succeeded"] = int(status.get("succeeded") or 0) + count
            status["active"] = max(0, int(status.get("active") or 0) - count)

        return self.edit_object("Job", namespace, name, count_them)

    def complete_job(self, namespace: str, name: str, *, failed: bool = False) -> dict[str, Any]:
        """Finish a Job: its pods Succeeded (or Failed) and the Complete/Failed condition."""
        job = self.get_object("Job", namespace, name)
        assert job is not None
        phase = "Failed" if failed else "Succeeded"
        for pod in self.store.owned_pods(job):
            self.edit_object(
                "Pod",
                namespace,
                pod["metadata"]["name"],
                lambda p: p["status"].update(phase=phase, containerStatuses=[_terminated(phase)]),
            )

        def finish(j: dict[str, Any]) -> None:
            stamp = now_stamp()
            count = int(j["spec"].get("completions") or j["spec"].get("parallelism", 1))
            j["status"].update(active=0, **{"failed" if failed else "succeeded": count})
            j["status"]["conditions"] = [
                {
                    "type": "Failed" if failed else "Complete",
                    "status": "True",
                    "lastProbeTime": stamp,
                    "lastTransitionTime": stamp,
                }
            ]
            if not failed:
                j["status"]["completionTime"] = stamp

        return self.edit_object("Job", namespace, name, finish)

    # --- request handling ------------------------------------------------------------

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        split = urlsplit(handler.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(handler.headers.get("Content-Length") or 0)
        raw = handler.rfile.read(length) if length else b""
        error: ApiError | None = None
        try:
            route = route_request(
                method,
                split.path,
                query,
                handler.headers.get("Content-Type") or "",
                self.store.resources,
            )
        except ApiError as exc:
            route, error = Route("unknown"), exc
            if exc.code == 404:
                # the real server authorizes a request before it finds nothing to serve:
                # a resource the fake does not serve is still a 403 without the grant
                try:
                    self._authorize_unserved(method, split.path)
                except ApiError as refused:
                    error = refused
        record = RequestRecord(method, split.path, route.verb)
        with self._hooks_lock:
            self.requests.append(record)
            self.counts[route.verb] += 1
            delay = next((r for r in self._delays if r.matches(method, split.path)), None)
            fault = next((r for r in self._faults if r.matches(method, split.path)), None)
            for rule in (delay, fault):
                if rule is not None and rule.remaining is not None:
                    rule.remaining -= 1
        if delay is not None:
            self.stopping.wait(delay.seconds)
        headers: dict[str, str] = {}
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            code, body = 401, ApiError(401, "Unauthorized", "Unauthorized").status()
        elif error is not None:
            code, body = error.code, error.status()
        elif fault is not None:
            reason = {429: "TooManyRequests", 503: "ServiceUnavailable"}.get(
                fault.status, "InternalError"
            )
            code, body = fault.status, ApiError(fault.status, reason, "injected failure").status()
            if fault.retry_after is not None:
                headers["Retry-After"] = str(fault.retry_after)
        else:
            try:
                self._authorize(route)
                code, body = self._dispatch(route, query, raw, handler)
            except ApiError as exc:
                code, body = exc.code, exc.status()
        record.status = code
        with self._hooks_lock:
            callbacks = [cb for rule, cb in self._after if rule.matches(method, split.path)]
            for rule, _ in self._after:
                if rule.matches(method, split.path) and rule.remaining is not None:
                    rule.remaining -= 1
        for callback in callbacks:
            callback(self)
        if isinstance(body, WatchRequest):
            with self._hooks_lock:
                self.open_watches += 1
            try:
                stream_watch(handler, body, self)
            finally:
                with self._hooks_lock:
                    self.open_watches -= 1
            return
        _respond(handler, code, body, headers)

    def install_crd(self, name: str) -> None:
        """Serve the custom resource of the vendored CRD ``tests/data/crds/<name>.yaml``
        (as ``kubectl apply -f`` of the CRD would), e.g. ``jobsets.jobset.x-k8s.io``."""
        self.store.install(crds.load_crd(name))

    def register_mutating_webhook(
        self, url: str, label: str, *, fail: bool = True, timeout_s: float = 10.0
    ) -> None:
        """Send every Job and Pod create whose labels carry ``label`` (an objectSelector
        ``exists``) to ``url`` as an AdmissionReview v1 and apply the JSON Patch it
        answers; ``fail``: failurePolicy Fail (an unreachable webhook refuses the create)
        rather than Ignore. (A real API server calls only https URLs.)"""
        self.webhooks.append((url, label, fail, timeout_s))

    def _mutate(self, resource: Any, namespace: str | None, obj: dict[str, Any]) -> dict[str, Any]:
        """The mutating admission phase of a create
        (staging/src/k8s.io/apiserver/pkg/admission/plugin/webhook/mutating/dispatcher.go)."""
        if resource.kind not in ("Job", "Pod"):
            return obj
        group, plural = ("batch", "jobs") if resource.kind == "Job" else ("", "pods")
        for url, label, fail, timeout_s in self.webhooks:
            if label not in ((obj.get("metadata") or {}).get("labels") or {}):
                continue
            uid = str(uuid.uuid4())
            review = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": uid,
                    "kind": {"group": group, "version": "v1", "kind": resource.kind},
                    "resource": {"group": group, "version": "v1", "resource": plural},
                    "namespace": namespace,
                    "operation": "CREATE",
                    "object": obj,
                },
            }
            request = urllib.request.Request(  # noqa: S310 - a test server's own URL
                url,
                data=json.dumps(review).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=timeout_s) as answer:  # noqa: S310
                    response = json.loads(answer.read())["response"]
            except (OSError, ValueError, KeyError) as exc:
                if not fail:
                    continue
                raise ApiError(
                    500,
                    "InternalError",
                    f'Internal error occurred: failed calling webhook "{url}": {exc}',
                ) from exc
            if response.get("uid") != uid or not response.get("allowed"):
                raise ApiError(400, "BadRequest", f"admission webhook {url} denied the request")
            if response.get("patchType") == "JSONPatch":
                for op in json.loads(base64.b64decode(response["patch"])):
                    obj = _json_patch(obj, op)
        return obj

    def enforce_rbac(self, rules: Rules, user: str = RBAC_USER) -> None:
        """From now on, authorize every request with ``rules`` (403 otherwise)."""
        self.rbac, self.rbac_user = rules, user

    def _authorize_unserved(self, method: str, path: str) -> None:
        """RBAC for a resource path the fake does not serve (group, plural, verb)."""
        rules = self.rbac
        parts = [p for p in path.split("/") if p]
        if rules is None or len(parts) < 4 or parts[0] != "apis":
            return
        group, rest = parts[1], parts[3:]
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        plural, name = rest[0], rest[1] if len(rest) > 1 else ""
        verbs = {"GET": "get" if name else "list", "POST": "create", "PUT": "update"}
        verb = verbs.get(method, {"PATCH": "patch", "DELETE": "delete"}.get(method, "get"))
        rules.check(group, plural, verb, namespace, name, self.rbac_user)

    def _authorize(self, route: Route) -> None:
        rules = self.rbac
        if rules is None or route.resource is None:
            return
        resource = route.resource
        group = "" if resource.group_version == "v1" else resource.group_version.split("/")[0]
        plural = resource.plural + (f"/{route.subresource}" if route.subresource else "")
        name = route.name or ""
        verb = {"apply": "patch"}.get(route.verb, route.verb)
        rules.check(group, plural, verb, route.namespace, name, self.rbac_user)
        if route.verb == "apply" and not self.store.exists(resource, route.namespace, name):
            rules.check(group, plural, "create", route.namespace, name, self.rbac_user)

    def _dispatch(
        self, route: Route, query: dict[str, str], raw: bytes, handler: BaseHTTPRequestHandler
    ) -> tuple[int, Any]:
        if route.discovery is not None:
            return 200, route.discovery(self.url.removeprefix("http://"))
        resource, ns, name = route.resource, route.namespace, route.name or ""
        assert resource is not None
        user_agent = handler.headers.get("User-Agent") or "unknown"
        manager = query.get("fieldManager") or user_agent.split("/")[0]
        force = query.get("force") == "true"
        if force and route.verb != "apply":
            raise _invalid_options("force", "Forbidden: may not be specified for non-apply patch")
        if route.verb == "watch":
            return 200, watch_request(resource, ns, query)
        if route.verb == "list":
            limit = int(query.get("limit") or 0)
            return 200, self.store.list_objects(
                resource,
                ns,
                query.get("labelSelector", ""),
                query.get("fieldSelector", ""),
                limit,
                query.get("continue", ""),
            )
        if route.verb == "get":
            obj = self.store.get(resource, ns, name)
            return 200, obj
        if route.verb == "delete":
            options = _json(raw) if raw else {}
            policy = query.get("propagationPolicy") or options.get("propagationPolicy")
            grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
            deleted = self.store.delete(resource, ns, name, policy)
            # the fake removes at once; what grace the pod was given is kept for tests
            self.delete_grace[(resource.kind, ns, name)] = None if grace is None else int(grace)
            return 200, deleted
        if route.verb == "apply":
            if not query.get("fieldManager"):
                raise _invalid_options(
                    "fieldManager", "Required value: is required for apply patch"
                )
            config = _apply_body(raw)
            if query.get("fieldValidation") == "Strict":
                if resource.custom is not None:
                    _refuse_unknown_custom_fields(self.store, resource, ns, name, config)
                else:
                    refuse_unknown_fields(resource, config)
            obj, created = self.store.apply(resource, ns, name, config, manager, force)
            return (201 if created else 200), obj
        body = _json(raw)
        merge: Callable[[dict[str, Any], Any], dict[str, Any]] = fieldmanager.merge_patch
        if route.extra.get("strategic"):  # lists merged by their patchMergeKey

            def merge(old: dict[str, Any], patch: Any) -> dict[str, Any]:
                return strategic_merge_patch(resource.kind, old, patch)

        if route.verb == "create" and isinstance(body, dict):
            body = self._mutate(resource, ns, body)
        if query.get("fieldValidation") == "Strict" and isinstance(body, dict):
            whole = body
            if route.verb == "patch":
                whole = merge(self.store.get(resource, ns, name), body)
            if resource.custom is not None:
                _refuse_unknown_custom_fields(self.store, resource, ns, name, whole)
            elif route.verb == "patch":
                # a patch with an unknown field is a 422 on the patch itself (the real
                # server's patcher), where a create or an update is a 400
                try:
                    refuse_unknown_fields(resource, whole)
                except ApiError as error:
                    message = f'{resource.kind} "{name}" is invalid: patch: {error.message}'
                    cause = {"reason": "FieldValueInvalid", "message": error.message}
                    raise ApiError(
                        422, "Invalid", message, {"causes": [cause | {"field": "patch"}]}
                    ) from error
            else:
                refuse_unknown_fields(resource, whole)
        if route.verb == "create":
            return 201, self.store.create(resource, ns, body, manager)
        if route.verb == "update":
            return 200, self.store.update(resource, ns, name, body, manager, route.subresource)
        if route.verb == "patch":
            if not isinstance(body, dict):
                raise ApiError(415, "UnsupportedMediaType", "the fake supports merge patches only")
            return 200, self.store.patch(
                resource, ns, name, body, manager, route.subresource, merge=merge
            )
        if route.verb == "unsupported-patch":
            raise ApiError(
                415,
                "UnsupportedMediaType",
                "the fake serves merge, strategic merge and apply patches",
            )
        raise ApiError(405, "MethodNotAllowed", f"{route.verb} is not supported by the fake")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Watch events go out in many small writes; with Nagle on, each would wait ~40 ms
    # for the client's delayed ACK.
    disable_nagle_algorithm = True
    fake: FakeKubeApi

    def _serve(self) -> None:
        # The client may have given up waiting (timeout tests): nothing left to answer.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.fake._handle(self, self.command)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass


def _respond(
    handler: BaseHTTPRequestHandler, code: int, body: Any, headers: Mapping[str, str]
) -> None:
    data = json.dumps(body).encode()
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for key, value in headers.items():
        handler.send_header(key, value)
    # What end_headers() does, with the body in the same write (one packet, not two).
    handler._headers_buffer.append(b"\r\n" + data)  # type: ignore[attr-defined]
    handler.flush_headers()


def _refuse_unknown_custom_fields(
    store: Store, resource: Any, namespace: str | None, name: str, obj: dict[str, Any]
) -> None:
    """fieldValidation=Strict on a custom resource: fields its schema would prune are
    400 BadRequest, all of them named (apiextensions-apiserver's strict decoding of
    pruned fields, staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/
    customresource_handler.go)."""
    old = None
    if name and store.exists(resource, namespace, name):
        old = store.get(resource, namespace, name)
    _, unknown, _ = crds.prepare(resource.custom, obj, old, strict=True)
    if unknown:
        raise ApiError(
            400,
            "BadRequest",
            "strict decoding error: " + ", ".join(f'unknown field "{f}"' for f in unknown),
        )


def _apply_body(raw: bytes) -> Any:
    """An apply patch: YAML, of which JSON (what clients send) is the fast case."""
    try:
        return json.loads(raw or b"{}")
    except ValueError:
        pass
    try:
        return yaml.load(raw.decode(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506
    except yaml.YAMLError as exc:
        raise ApiError(400, "BadRequest", f"error decoding YAML: {exc}") from exc


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw or b"{}")
    except ValueError as exc:
        raise ApiError(400, "BadRequest", f"error decoding JSON: {exc}") from exc


def _invalid_options(field_name: str, message: str) -> ApiError:
    return ApiError(
        422,
        "Invalid",
        f'PatchOptions.meta.k8s.io "" is invalid: {field_name}: {message}',
        {
            "kind": "PatchOptions",
            "group": "meta.k8s.io",
            "causes": [{"reason": "FieldValueInvalid", "message": message, "field": field_name}],
        },
    )


def _terminated(phase: str) -> dict[str, Any]:
    code = 0 if phase == "Succeeded" else 1
    state = {
        "terminated": {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": now_stamp(),
            "finishedAt": now_stamp(),
        }
    }
    return {
        "name": "main",
        "ready": False,
        "restartCount": 0,
        "image": "busybox",
        "imageID": "",
        "state": state,
    }


def _candidate_nodes(pod_spec: Mapping[str, Any], nodes: list[dict[str, Any]]) -> list[str]:
    terms = (
        ((pod_spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        or {}
    ).get("nodeSelectorTerms") or []
    pinned = [
        v
        for t in terms
        for f in t.get("matchFields") or []
        if f.get("key") == "metadata.name"
        for v in f.get("values", [])
    ]
    if pinned:
        return sorted(set(pinned))
    selector = pod_spec.get("nodeSelector") or {}
    return [
        n["metadata"]["name"]
        for n in nodes
        if all((n["metadata"].get("labels") or {}).get(k) == v for k, v in selector.items())
    ]


def _json_patch(obj: dict[str, Any], op: Mapping[str, Any]) -> dict[str, Any]:
    """One RFC 6902 add/replace operation (what mutating webhooks answer here); ``-``
    appends to an array."""
    if op.get("op") not in ("add", "replace"):
        raise ApiError(500, "InternalError", f"unsupported JSON Patch op {op.get('op')!r}")
    out = clone(obj)
    keys = [k.replace("~1", "/").replace("~0", "~") for k in op["path"].split("/")[1:]]
    target: Any = out
    for key in keys[:-1]:
        target = target[int(key)] if isinstance(target, list) else target.setdefault(key, {})
    last = keys[-1]
    if isinstance(target, list):
        if last == "-":
            target.append(op["value"])
        elif op["op"] == "add":
            target.insert(int(last), op["value"])
        else:
            target[int(last)] = op["value"]
        return out
    if op["op"] == "replace" and last not in target:
        raise ApiError(500, "InternalError", f"JSON Patch replace of missing {op['path']}")
    target[last] = op["value"]
    return out
