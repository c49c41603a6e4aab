"""Object storage and API semantics of the fake Kubernetes API server.

Holds objects in their JSON form, keyed by (resource, namespace, name), with one global
resourceVersion counter that moves on every write. Errors are raised as ApiError and
turned into ``Status`` objects by the HTTP layer.
"""

from __future__ import annotations

import base64
import json
import re
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from . import crds, fieldmanager, validation
from .jsoncopy import clone


@dataclass(frozen=True)
class Resource:
    plural: str
    kind: str
    group_version: str
    namespaced: bool
    has_status: bool = True
    # a custom resource's definition (crds.CustomKind); None for built-in kinds
    custom: Any = field(default=None, compare=False, hash=False)

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"


RESOURCES = {
    r.plural: r
    for r in (
        Resource("namespaces", "Namespace", "v1", False),
        Resource("nodes", "Node", "v1", False),
        Resource("pods", "Pod", "v1", True),
        Resource("configmaps", "ConfigMap", "v1", True, has_status=False),
        Resource("resourcequotas", "ResourceQuota", "v1", True),
        Resource("jobs", "Job", "batch/v1", True),
        # stored only: no ReplicaSet or StatefulSet controller runs here
        Resource("replicasets", "ReplicaSet", "apps/v1", True),
        Resource("statefulsets", "StatefulSet", "apps/v1", True),
        Resource("events", "Event", "v1", True, has_status=False),
        # stored only: no driver or scheduler allocates here
        Resource("resourceslices", "ResourceSlice", "resource.k8s.io/v1", False, has_status=False),
        Resource("deviceclasses", "DeviceClass", "resource.k8s.io/v1", False, has_status=False),
        Resource("resourceclaims", "ResourceClaim", "resource.k8s.io/v1", True),
        Resource(
            "resourceclaimtemplates",
            "ResourceClaimTemplate",
            "resource.k8s.io/v1",
            True,
            has_status=False,
        ),
    )
}
BY_KIND = {r.kind: r for r in RESOURCES.values()}


class ApiError(Exception):
    def __init__(
        self, code: int, reason: str, message: str, details: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.code, self.reason, self.message, self.details = code, reason, message, details

    def status(self) -> dict[str, Any]:
        body = {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        }
        if self.details:
            body["details"] = self.details
        return body


def now_stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def not_found(resource: Resource | str, name: str) -> ApiError:
    plural = resource if isinstance(resource, str) else resource.plural
    return ApiError(404, "NotFound", f'{plural} "{name}" not found', {"name": name, "kind": plural})


def _matches_labels(selector: str, labels: dict[str, str]) -> bool:
    parts = [p.strip() for p in re.split(r",(?![^(]*\))", selector) if p.strip()]
    for part in parts:
        if m := re.fullmatch(r"(\S+)\s+(in|notin)\s+\((.*)\)", part):
            values = {v.strip() for v in m.group(3).split(",")}
            if (labels.get(m.group(1)) in values) != (m.group(2) == "in"):
                return False
        elif m := re.fullmatch(r"([^!=\s]+)\s*(!=|==|=)\s*(\S*)", part):
            key, op, value = m.groups()
            if (labels.get(key) == value) != (op != "!="):
                return False
        elif m := re.fullmatch(r"(!?)([^!=\s]+)", part):
            if (m.group(2) in labels) == bool(m.group(1)):
                return False
        else:
            raise ApiError(400, "BadRequest", f"unable to parse requirement: {part!r}")
    return True


_FIELDS = {
    "metadata.name": lambda o: o["metadata"].get("name"),
    "metadata.namespace": lambda o: o["metadata"].get("namespace"),
    "spec.nodeName": lambda o: (o.get("spec") or {}).get("nodeName", ""),
    "status.phase": lambda o: (o.get("status") or {}).get("phase", ""),
}


def _matches_fields(selector: str, obj: dict[str, Any]) -> bool:
    for part in filter(None, (p.strip() for p in selector.split(","))):
        m = re.fullmatch(r"([^!=]+)(!=|==|=)(.*)", part)
        if not m or m.group(1) not in _FIELDS:
            raise ApiError(400, "BadRequest", f'field label not supported: "{part}"')
        key, op, value = m.groups()
        if (str(_FIELDS[key](obj) or "") == value) != (op != "!="):
            return False
    return True


@dataclass(frozen=True)
class Change:
    """One write as a watch sees it: ``obj`` is the object after the write (for a
    deletion, the object as it was, carrying the deletion's resourceVersion) and
    ``previous`` the object before (None for a creation)."""

    version: int
    type: str  # ADDED, MODIFIED or DELETED
    plural: str
    namespace: str
    obj: dict[str, Any]
    previous: dict[str, Any] | None


def selected(obj: dict[str, Any], label_selector: str, field_selector: str) -> bool:
    """Whether ``obj`` passes a list's or watch's label and field selectors."""
    return (
        not label_selector or _matches_labels(label_selector, obj["metadata"].get("labels") or {})
    ) and (not field_selector or _matches_fields(field_selector, obj))


class Store:
    """Thread-safe object store with Kubernetes write semantics.

    Stored objects are never changed in place: every write stores a new dict, so list
    snapshots and the watch history can hold references instead of copies.
    """

    # Changes kept for watches that start from a resourceVersion. The API server's watch
    # cache keeps a bounded window of events too; a watch from before the window gets
    # 410 Gone ("too old resource version", staging/src/k8s.io/apiserver/pkg/storage/
    # cacher/watch_cache.go) and the client lists again.
    HISTORY = 20_000

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)  # notified on every write
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        # (plural, namespace) -> name -> object: the same objects, found without a scan
        self.index: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        self.version = 0
        self.history: deque[Change] = deque(maxlen=self.HISTORY)
        self.oldest_version = 0  # watches may start from here on
        # namespace -> requests of its pending and running pods (dropped when one changes)
        self.pod_totals: dict[str, dict[str, Any]] = {}
        # paged lists in progress: snapshot id -> (items, resourceVersion); see forget_history()
        self.snapshots: dict[str, tuple[list[dict[str, Any]], str]] = {}
        # what this server serves: the built-in kinds and the installed CRDs
        self.resources: dict[str, Resource] = dict(RESOURCES)
        self.by_kind: dict[str, Resource] = dict(BY_KIND)
        # Kubernetes 1.36 and later (MutableSchedulingDirectivesForSuspendedJobs): the Job
        # controller clears a suspended Job's startTime and its template may change once
        # its pods stopped. False imitates 1.35 and before, where startTime stays and
        # whoever changes the template clears it through jobs/status first.
        self.suspended_jobs_mutable = True

    def install(self, custom: crds.CustomKind) -> Resource:
        """Serve a custom resource from now on (as creating its CRD does)."""
        resource = Resource(
            custom.plural,
            custom.kind,
            custom.group_version,
            custom.namespaced,
            has_status=custom.has_status,
            custom=custom,
        )
        with self.lock:
            self.resources[custom.plural] = resource
            self.by_kind[custom.kind] = resource
        return resource

    # --- helpers ---------------------------------------------------------------------

    def key(self, resource: Resource, namespace: str | None, name: str) -> tuple[str, str, str]:
        return (resource.plural, namespace or "" if resource.namespaced else "", name)

    def _bump(self) -> str:
        self.version += 1
        return str(self.version)

    def _put(self, key: tuple[str, str, str], obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` under ``key`` with a new resourceVersion; the one way objects
        are written, so every write is seen by watches."""
        previous = self.objects.get(key)
        obj["metadata"]["resourceVersion"] = self._bump()
        self.objects[key] = obj
        self.index.setdefault(key[:2], {})[key[2]] = obj
        if key[0] == "pods":
            self.pod_totals.pop(key[1], None)
        self._record("MODIFIED" if previous is not None else "ADDED", key, obj, previous)
        return obj

    def _pop(self, key: tuple[str, str, str]) -> dict[str, Any] | None:
        """Remove the object under ``key``; the one way objects are deleted."""
        previous = self.objects.pop(key, None)
        if previous is None:
            return None
        self.index.get(key[:2], {}).pop(key[2], None)
        if key[0] == "pods":
            self.pod_totals.pop(key[1], None)
        gone = {**previous, "metadata": {**previous["metadata"], "resourceVersion": self._bump()}}
        self._record("DELETED", key, gone, previous)
        return previous

    def _record(
        self,
        kind: str,
        key: tuple[str, str, str],
        obj: dict[str, Any],
        previous: dict[str, Any] | None,
    ) -> None:
        if len(self.history) == self.history.maxlen:
            self.oldest_version = self.history[0].version
        self.history.append(Change(self.version, kind, key[0], key[1], obj, previous))
        self.changed.notify_all()

    def of(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Stored objects of ``plural`` (in ``namespace``, or all), by namespace and name;
        the stored dicts themselves: do not change them."""
        if namespace is not None:
            found = self.index.get((plural, namespace), {})
            return [found[name] for name in sorted(found)]
        return [
            objects[name]
            for (kind, _), objects in sorted(self.index.items())
            if kind == plural
            for name in sorted(objects)
        ]

    def changes_after(self, version: int) -> list[Change]:
        """Changes with a resourceVersion above ``version``; 410 Gone when the history
        no longer reaches back that far."""
        if version < self.oldest_version:
            raise ApiError(
                410,
                "Expired",
                f"too old resource version: {version} ({self.oldest_version})",
            )
        if not self.history or self.history[-1].version <= version:
            return []
        found = []
        for change in reversed(self.history):
            if change.version <= version:
                break
            found.append(change)
        found.reverse()
        return found

    def _require_namespace(self, resource: Resource, namespace: str | None) -> None:
        if (
            resource.namespaced
            and (RESOURCES["namespaces"].plural, "", namespace) not in self.objects
        ):
            raise not_found("namespaces", namespace or "")

    def _invalid(self, resource: Resource, name: str, found: list[tuple[str, str]]) -> ApiError:
        message = f'{resource.kind} "{name}" is invalid: ' + ", ".join(
            f"{f}: {m}" for f, m in found
        )
        causes = [{"reason": "FieldValueInvalid", "message": m, "field": f} for f, m in found]
        details = {"name": name, "kind": resource.kind, "causes": causes}
        return ApiError(422, "Invalid", message, details)

    def _validate(
        self, resource: Resource, obj: dict[str, Any], old: dict[str, Any] | None
    ) -> None:
        undecodable = validation.undecodable_quantity(resource.kind, obj)
        if undecodable:
            # the body cannot be decoded into the typed object at all: 400, not 422
            raise ApiError(
                400,
                "BadRequest",
                f'{resource.kind} in version "v1" cannot be handled as a {resource.kind}: '
                f"{undecodable}",
                {},
            )
        found = validation.problems(
            resource.kind, obj, old, suspended_jobs_mutable=self.suspended_jobs_mutable
        )
        if found:
            raise self._invalid(resource, obj["metadata"].get("name", ""), found)

    # --- reads -----------------------------------------------------------------------

    def load(self, objects: list[dict[str, Any]]) -> None:
        """Seed many objects at once, as the state a cluster starts from: identity
        fields are filled in, nothing is validated, and no watch history is written
        (a watch can start only after them). For benchmarks of large clusters."""
        with self.lock:
            for obj in objects:
                resource = self.by_kind[obj["kind"]]
                obj["apiVersion"] = resource.group_version
                meta = obj["metadata"]
                meta.setdefault("uid", str(uuid.uuid4()))
                meta.setdefault("creationTimestamp", now_stamp())
                meta["resourceVersion"] = self._bump()
                key = self.key(resource, meta.get("namespace"), meta["name"])
                self.objects[key] = obj
                self.index.setdefault(key[:2], {})[key[2]] = obj
            self.pod_totals.clear()
            self.oldest_version = self.version

    def forget_history(self) -> None:
        """Forget every list snapshot and the watch history: continue tokens given out
        so far answer 410 Gone, and so do watches from an older resourceVersion.

        A fault injected on demand, not etcd's compaction: a 1.37 API server lists pages
        and serves watches from its watch cache, which keeps about 75 s of snapshots and
        events, so a compaction alone changes nothing a client sees
        (tests/real_cluster/test_watches.py). The 410s come once that window has
        passed, after an API server restart that follows a compaction, or from servers
        that page straight from etcd."""
        with self.lock:
            self.snapshots.clear()
            self.history.clear()
            self.oldest_version = self.version

    def exists(self, resource: Resource, namespace: str | None, name: str) -> bool:
        with self.lock:
            return self.key(resource, namespace, name) in self.objects

    def get(self, resource: Resource, namespace: str | None, name: str) -> dict[str, Any]:
        with self.lock:
            obj = self.objects.get(self.key(resource, namespace, name))
            if obj is None:
                raise not_found(resource, name)
            return clone(obj)

    def list_objects(
        self,
        resource: Resource,
        namespace: str | None,
        label_selector: str = "",
        field_selector: str = "",
        limit: int = 0,
        token: str = "",
    ) -> dict[str, Any]:
        # A paged list is one consistent snapshot: later pages come from the state at
        # the first page's resourceVersion (etcd reads at that revision), and once that
        # revision is compacted the token is refused with 410 Gone ("The provided
        # continue parameter is too old ..."; staging/src/k8s.io/apiserver/pkg/storage/
        # etcd3/store.go). ``forget_history()`` plays that.
        start = 0
        if token:
            try:
                decoded = json.loads(base64.urlsafe_b64decode(token))
                start, snapshot_id = decoded["start"], decoded["snapshot"]
            except (ValueError, KeyError, TypeError) as exc:
                raise ApiError(400, "BadRequest", "invalid continue token") from exc
            with self.lock:
                snapshot = self.snapshots.get(snapshot_id)
            if snapshot is None:
                raise ApiError(
                    410,
                    "Expired",
                    "The provided continue parameter is too old to display a consistent list "
                    "result. You can start a new list without the continue parameter.",
                )
            items, version = snapshot
        else:
            with self.lock:
                items = [
                    obj
                    for obj in self.of(resource.plural, namespace if resource.namespaced else None)
                    if selected(obj, label_selector, field_selector)
                ]
                version = str(self.version)
                snapshot_id = uuid.uuid4().hex
                if limit and limit < len(items):
                    self.snapshots[snapshot_id] = (items, version)
        end = start + limit if limit else len(items)
        # list items do not repeat kind and apiVersion (stored objects are never changed
        # in place, so the page may share their insides)
        page = [
            {k: v for k, v in o.items() if k not in ("kind", "apiVersion")}
            for o in items[start:end]
        ]
        meta: dict[str, Any] = {"resourceVersion": version}
        if end < len(items):
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"start": end, "snapshot": snapshot_id}).encode()
            ).decode()
            meta["remainingItemCount"] = len(items) - end
        return {
            "kind": resource.list_kind,
            "apiVersion": resource.group_version,
            "metadata": meta,
            "items": page,
        }

    # --- writes ----------------------------------------------------------------------

    def create(
        self, resource: Resource, namespace: str | None, body: dict[str, Any], manager: str
    ) -> dict[str, Any]:
        with self.lock:
            obj = clone(body)
            meta = obj.setdefault("metadata", {})
            if not meta.get("name") and meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            name = meta.get("name") or ""
            if resource.namespaced:
                if meta.get("namespace") not in (None, namespace):
                    raise ApiError(
                        400,
                        "BadRequest",
                        "the namespace of the object does not match the namespace on the request",
                    )
                self._require_namespace(resource, namespace)
            if self.key(resource, namespace, name) in self.objects:
                raise ApiError(
                    409,
                    "AlreadyExists",
                    f'{resource.plural} "{name}" already exists',
                    {"name": name, "kind": resource.plural},
                )
            if resource.kind == "Pod":
                refusal = self.quota_refusal(namespace or "", name, obj.get("spec") or {})
                if refusal is not None:
                    raise refusal
            for field in (
                "uid",
                "resourceVersion",
                "creationTimestamp",
                "managedFields",
                "generation",
            ):
                meta.pop(field, None)
            return self._store(resource, namespace, None, obj, manager, "")

    def update(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        body: dict[str, Any],
        manager: str,
        subresource: str = "",
    ) -> dict[str, Any]:
        with self.lock:
            old = self.get(resource, namespace, name)
            wanted = body.get("metadata", {}).get("resourceVersion")
            if wanted and wanted != old["metadata"]["resourceVersion"]:
                raise self.conflict(resource, name)
            obj = clone(body)
            obj.setdefault("metadata", {})["name"] = name
            return self._store(resource, namespace, old, obj, manager, subresource)

    def conflict(self, resource: Resource, name: str) -> ApiError:
        return ApiError(
            409,
            "Conflict",
            f'Operation cannot be fulfilled on {resource.plural} "{name}": the object has been '
            "modified; please apply your changes to the latest version and try again",
            {"name": name, "kind": resource.plural},
        )

    def patch(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        patch: dict[str, Any],
        manager: str,
        subresource: str = "",
        *,
        merge: Callable[[dict[str, Any], Any], dict[str, Any]] = fieldmanager.merge_patch,
    ) -> dict[str, Any]:
        """A JSON merge patch, or with ``merge`` another kind (strategic)."""
        with self.lock:
            old = self.get(resource, namespace, name)
            wanted = (patch.get("metadata") or {}).get("resourceVersion")
            if wanted and wanted != old["metadata"]["resourceVersion"]:
                raise self.conflict(resource, name)
            obj = merge(old, patch)
            return self._store(resource, namespace, old, obj, manager, subresource)

    def apply(
        self,
        resource: Resource,
        namespace: str | None,
        name: str,
        config: dict[str, Any],
        manager: str,
        force: bool,
    ) -> tuple[dict[str, Any], bool]:
        """Server-side apply; returns (object, created)."""
        with self.lock:
            meta = config.get("metadata") or {}
            if (
                config.get("kind") != resource.kind
                or config.get("apiVersion") != resource.group_version
            ):
                raise ApiError(
                    400,
                    "BadRequest",
                    f"apply body must be a {resource.group_version} {resource.kind}",
                )
            if meta.get("name") != name:
                raise ApiError(
                    400, "BadRequest", "the name of the object does not match the name on the URL"
                )
            key = self.key(resource, namespace, name)
            live = clone(self.objects.get(key))
            if live is None:
                self._require_namespace(resource, namespace)
            wanted = meta.get("resourceVersion")
            if live is not None and wanted and wanted != live["metadata"]["resourceVersion"]:
                raise self.conflict(resource, name)
            try:
                result = fieldmanager.server_side_apply(live, config, manager, force, now_stamp())
            except fieldmanager.ApplyConflict as exc:
                lines = [f'conflict with "{m}": .{".".join(p)}' for m, p in exc.conflicts]
                causes = [
                    {
                        "reason": "FieldManagerConflict",
                        "message": f'conflict with "{m}"',
                        "field": "." + ".".join(p),
                    }
                    for m, p in exc.conflicts
                ]
                raise ApiError(
                    409,
                    "Conflict",
                    f"Apply failed with {len(lines)} conflict(s): " + "; ".join(lines),
                    {"name": name, "kind": resource.plural, "causes": causes},
                ) from exc
            result["metadata"]["name"] = name
            if resource.namespaced:
                result["metadata"]["namespace"] = namespace
            if live is not None and _content(result) == _content(live):
                return live, False  # a no-op apply does not write (resourceVersion stays)
            return self._store(resource, namespace, live, result, None, ""), live is None

    def delete(
        self, resource: Resource, namespace: str | None, name: str, propagation: str | None = None
    ) -> dict[str, Any]:
        with self.lock:
            obj = self.get(resource, namespace, name)
            key = self.key(resource, namespace, name)
            if resource.plural == "pods" and (obj.get("spec") or {}).get("nodeName"):
                # a pod bound to a node is deleted gracefully: marked first (even with a
                # grace of 0), then removed (pkg/registry/core/pod/strategy.go
                # CheckGracefulDelete): watches see MODIFIED, then DELETED
                marked = clone(obj)
                marked["metadata"]["deletionTimestamp"] = now_stamp()
                marked["metadata"]["deletionGracePeriodSeconds"] = 0
                obj = self._put(key, marked)
            self._pop(key)
            if resource.plural == "namespaces":
                for key in [k for k in self.objects if k[1] == name]:
                    self._pop(key)
            if resource.plural == "jobs" and propagation in ("Background", "Foreground"):
                for pod in self.owned_pods(obj):
                    self._pop(self.key(RESOURCES["pods"], namespace, pod["metadata"]["name"]))
            if resource.plural in ("pods", "resourcequotas"):
                return obj  # these kinds answer with the deleted object
            return {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "kind": resource.plural, "uid": obj["metadata"]["uid"]},
            }

    def _store(
        self,
        resource: Resource,
        namespace: str | None,
        old: dict[str, Any] | None,
        obj: dict[str, Any],
        manager: str | None,
        subresource: str,
    ) -> dict[str, Any]:
        """Fill server-owned fields, validate, run controllers, save; ``manager`` None
        means ownership was already computed (apply)."""
        meta = obj.setdefault("metadata", {})
        obj["kind"], obj["apiVersion"] = resource.kind, resource.group_version
        if resource.namespaced:
            meta["namespace"] = namespace
        else:
            meta.pop("namespace", None)
        if old is not None:
            if subresource == "status":
                status = obj.get("status")
                obj = clone(old)
                obj["status"] = status
                meta = obj["metadata"]
            elif resource.has_status:
                obj["status"] = clone(old.get("status"))  # status is the controllers'
                if obj["status"] is None:
                    obj.pop("status")
            for field in ("uid", "creationTimestamp"):
                meta[field] = old["metadata"][field]
            spec_changed = _spec(obj) != _spec(old)
            if _has_generation(resource):
                meta["generation"] = old["metadata"].get("generation", 1) + int(spec_changed)
            else:
                meta.pop("generation", None)
        else:
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_stamp()
            if _has_generation(resource):
                meta["generation"] = 1
            self._defaults(resource, obj)
        if resource.kind == "Pod" and subresource != "status":
            _default_toleration_seconds(obj.setdefault("spec", {}))
        if resource.custom is not None:
            obj, _, found = crds.prepare(resource.custom, obj, old, strict=False)
            meta = obj["metadata"]
            if found:
                raise self._invalid(resource, meta.get("name", ""), found)
        self._validate(resource, obj, old)
        if manager is not None:
            meta.pop("managedFields", None)
            if old is not None:
                meta["managedFields"] = clone(old["metadata"].get("managedFields"))
                if meta["managedFields"] is None:
                    meta.pop("managedFields")
            fieldmanager.record_update(old, obj, manager, subresource, now_stamp())
        if (
            old is not None
            and _content(obj) == _content(old)
            and meta.get("managedFields") == old["metadata"].get("managedFields")
        ):
            return old  # nothing changed: no write, resourceVersion stays
        self._react(resource, old, obj)
        key = self.key(resource, namespace, meta["name"])
        self._put(key, obj)
        if resource.kind in ("Pod", "ResourceQuota"):
            self.refresh_quota_status(namespace or "")
        return clone(self.objects[key])

    def put_raw(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store ``obj`` "by hand": no validation, no managedFields, no controllers; only
        server-owned identity fields are filled in and resourceVersion moves."""
        with self.lock:
            obj = clone(obj)
            resource = self.by_kind[obj["kind"]]
            obj["apiVersion"] = resource.group_version
            meta = obj.setdefault("metadata", {})
            key = self.key(resource, meta.get("namespace"), meta["name"])
            old = self.objects.get(key)
            if not resource.namespaced:
                meta.pop("namespace", None)
            meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
            meta.setdefault(
                "creationTimestamp", old["metadata"]["creationTimestamp"] if old else now_stamp()
            )
            if _has_generation(resource):
                meta.setdefault("generation", 1)
            self._put(key, obj)
            if resource.kind in ("Pod", "ResourceQuota"):
                self.refresh_quota_status(meta.get("namespace", ""))
            return clone(self.objects[key])

    def remove_raw(self, kind: str, namespace: str | None, name: str) -> bool:
        with self.lock:
            resource = self.by_kind[kind]
            return self._pop(self.key(resource, namespace, name)) is not None

    # --- defaults and controllers ----------------------------------------------------

    def _defaults(self, resource: Resource, obj: dict[str, Any]) -> None:
        meta, spec = obj["metadata"], obj.setdefault("spec", {}) if resource.has_status else {}
        if resource.kind == "Namespace":
            meta.setdefault("labels", {})["kubernetes.io/metadata.name"] = meta["name"]
            spec.setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
        elif resource.kind == "Pod":
            status = obj.setdefault("status", {})
            status.setdefault("phase", "Pending")
            if spec.get("schedulingGates"):
                # applySchedulingGatedCondition (pkg/registry/core/pod/strategy.go)
                status["conditions"] = [
                    {
                        "type": "PodScheduled",
                        "status": "False",
                        "reason": "SchedulingGated",
                        "message": "Scheduling is blocked due to non-empty scheduling gates",
                    }
                ]
        elif resource.kind == "Job":
            spec.setdefault("parallelism", 1)
            if "completions" not in spec and spec["parallelism"] == 1:
                spec["completions"] = 1
            spec.setdefault("backoffLimit", 6)
            spec.setdefault("suspend", False)
            spec.setdefault("completionMode", "NonIndexed")
            uid, name = meta["uid"], meta["name"]
            spec.setdefault(
                "selector", {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
            )
            template_meta = spec.setdefault("template", {}).setdefault("metadata", {})
            template_meta.setdefault("labels", {}).update(
                {
                    "batch.kubernetes.io/controller-uid": uid,
                    "batch.kubernetes.io/job-name": name,
                    "controller-uid": uid,
                    "job-name": name,
                }
            )
            obj["status"] = {}
        elif resource.kind == "ResourceQuota":
            obj["status"] = {}
        elif resource.kind == "Node":
            obj.setdefault("status", {})

    def _react(self, resource: Resource, old: dict[str, Any] | None, obj: dict[str, Any]) -> None:
        """The Job controller's part that Tidegate depends on, done synchronously
        (``syncJob`` in ``pkg/controller/job/job_controller.go``): suspending deletes the
        active pods, marks the Job Suspended and clears ``status.startTime`` (1.36 and
        later, MutableSchedulingDirectivesForSuspendedJobs); resuming sets ``startTime``
        to now."""
        if resource.kind != "Job":
            return
        suspended = bool(obj["spec"].get("suspend"))
        was = bool(old["spec"].get("suspend")) if old else None
        status = obj.setdefault("status", {})
        if suspended and was is not True:
            for pod in self.owned_pods(obj):
                if (pod.get("status") or {}).get("phase") in ("Pending", "Running"):
                    self._pop(
                        self.key(
                            RESOURCES["pods"], pod["metadata"]["namespace"], pod["metadata"]["name"]
                        )
                    )
            status["active"] = 0
            status["conditions"] = [_condition("Suspended", "True", "JobSuspended")]
            if self.suspended_jobs_mutable:
                status.pop("startTime", None)
        elif not suspended and was is not False:
            status["startTime"] = now_stamp()
            if old is not None:
                status["conditions"] = [_condition("Suspended", "False", "JobResumed")]

    def owned_pods(self, job: dict[str, Any]) -> list[dict[str, Any]]:
        uid = job["metadata"]["uid"]
        return [
            obj
            for obj in self.of("pods", job["metadata"].get("namespace", ""))
            if any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])
        ]

    def quota_refusal(self, namespace: str, name: str, pod_spec: dict[str, Any]) -> ApiError | None:
        """The 403 ResourceQuota admission answers a pod create that would pass a quota
        of its namespace (plugin/pkg/admission/resourcequota/controller.go: "exceeded
        quota: <name>, requested: ..., used: ..., limited: ..."), or None."""
        with self.lock:
            self.refresh_quota_status(namespace)
            for quota in self.of("resourcequotas", namespace):
                hard = (quota.get("spec") or {}).get("hard") or {}
                used = (quota.get("status") or {}).get("used") or {}
                for key, limit in sorted(hard.items()):
                    resource = key.removeprefix("requests.")
                    asked = sum(
                        parse_quantity(
                            ((c.get("resources") or {}).get("requests") or {}).get(resource, 0)
                        )
                        for c in pod_spec.get("containers", [])
                    )
                    now = parse_quantity(used.get(key, 0))
                    if asked and now + asked > parse_quantity(limit):
                        return ApiError(
                            403,
                            "Forbidden",
                            f'pods "{name}" is forbidden: exceeded quota: '
                            f"{quota['metadata']['name']}, requested: {key}={asked}, "
                            f"used: {key}={now}, limited: {key}={limit}",
                        )
        return None

    def refresh_quota_status(self, namespace: str) -> None:
        """status.hard mirrors spec.hard; status.used sums the requests of live pods. A
        status that changes is written like the quota controller's status update
        (pkg/controller/resourcequota/resource_quota_controller.go): a new
        resourceVersion that watches see."""
        quotas = self.of("resourcequotas", namespace)
        if not quotas:
            return
        totals = self.pod_totals.get(namespace)
        if totals is None:
            totals = self.pod_totals[namespace] = {}
            for pod in self.of("pods", namespace):
                if pod.get("status", {}).get("phase") in ("Pending", "Running"):
                    for resource, amount in _pod_requests(pod).items():
                        totals[resource] = totals.get(resource, 0) + amount
        for quota in quotas:
            hard = (quota.get("spec") or {}).get("hard") or {}
            used = {}
            for key in hard:
                total = totals.get(key.removeprefix("requests."), 0)
                used[key] = str(int(total)) if total == int(total) else str(total)
            status = {"hard": dict(hard), "used": used}
            if quota.get("status") != status:
                meta = quota["metadata"]
                self._put(
                    ("resourcequotas", namespace, meta["name"]),
                    {**quota, "metadata": dict(meta), "status": status},
                )


def _pod_requests(pod: dict[str, Any]) -> dict[str, Any]:
    """The sum of a pod's container requests."""
    totals: dict[str, Any] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        for resource, value in ((container.get("resources") or {}).get("requests") or {}).items():
            totals[resource] = totals.get(resource, 0) + parse_quantity(value)
    return totals


def _condition(kind: str, status: str, reason: str) -> dict[str, str]:
    stamp = now_stamp()
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "lastProbeTime": stamp,
        "lastTransitionTime": stamp,
    }


def _spec(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "kind", "apiVersion")}


def _content(obj: dict[str, Any]) -> Any:
    meta = {
        k: v for k, v in obj["metadata"].items() if k not in ("managedFields", "resourceVersion")
    }
    return ({**obj, "metadata": meta}, obj["metadata"].get("managedFields"))


# Kinds whose registry strategy keeps metadata.generation (PrepareForCreate sets it to 1:
# pkg/registry/core/pod, pkg/registry/batch/job, pkg/registry/apps/*; every custom
# resource). ResourceQuotas, ConfigMaps, Namespaces and Nodes have none.
GENERATION_KINDS = frozenset({"Pod", "Job", "Deployment", "StatefulSet", "ReplicaSet"})


def _has_generation(resource: Resource) -> bool:
    return resource.custom is not None or resource.kind in GENERATION_KINDS


# The DefaultTolerationSeconds admission plugin, on every pod create and update
# (plugin/pkg/admission/defaulttolerationseconds/admission.go): a pod that tolerates
# neither taint (by key, or by an empty key; by NoExecute, or by an empty effect) is
# given 300 s for it.
_NODE_TROUBLE_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def _default_toleration_seconds(spec: dict[str, Any]) -> None:
    tolerations = spec.get("tolerations") or []
    for key in _NODE_TROUBLE_TAINTS:
        if not any(
            isinstance(t, dict)
            and t.get("key", "") in (key, "")
            and t.get("effect", "") in ("NoExecute", "")
            for t in tolerations
        ):
            tolerations.append(
                {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
            )
    spec["tolerations"] = tolerations
