"""Workload objects of every integrated kind, as their owners would write them."""

from __future__ import annotations

from typing import Any

QUEUE = "tidegate.io/queue"


def container(gpus: int | None, resource: str = "nvidia.com/gpu") -> dict[str, Any]:
    resources: dict[str, dict[str, Any]] = (
        {"limits": {resource: gpus}} if gpus else {"requests": {"cpu": "1"}}
    )
    return {"name": "main", "image": "trainer:1", "resources": resources}


def pod_template(gpus: int | None, **spec: Any) -> dict[str, Any]:
    return {"spec": {"restartPolicy": "Never", "containers": [container(gpus)], **spec}}


def meta(namespace: str, name: str, queue: str, annotations: dict[str, str] | None = None) -> dict:
    found: dict[str, Any] = {"name": name, "namespace": namespace, "labels": {QUEUE: queue}}
    if annotations:
        found["annotations"] = annotations
    return found


def jobset(
    namespace: str, name: str, queue: str, *, replicas: int = 2, parallelism: int = 1, gpus: int = 4
) -> dict[str, Any]:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": meta(namespace, name, queue),
        "spec": {
            "suspend": True,
            "replicatedJobs": [
                {
                    "name": "workers",
                    "replicas": replicas,
                    "template": {
                        "spec": {
                            "parallelism": parallelism,
                            "completions": parallelism,
                            "template": pod_template(gpus),
                        }
                    },
                }
            ],
        },
    }


def pytorchjob(
    namespace: str,
    name: str,
    queue: str,
    *,
    workers: int = 2,
    gpus: int = 1,
    elastic: tuple[int, int] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "runPolicy": {"suspend": True},
        "pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": pod_template(gpus)},
            "Worker": {
                "replicas": workers,
                "restartPolicy": "OnFailure",
                "template": pod_template(gpus),
            },
        },
    }
    if elastic is not None:
        spec["elasticPolicy"] = {"minReplicas": elastic[0], "maxReplicas": elastic[1]}
        del spec["pytorchReplicaSpecs"]["Master"]  # torchrun elastic jobs have workers only
    return {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": meta(namespace, name, queue),
        "spec": spec,
    }


def _ray_cluster_spec(workers: int, gpus: int, minimum: int | None) -> dict[str, Any]:
    group: dict[str, Any] = {
        "groupName": "gpu",
        "replicas": workers,
        "minReplicas": minimum if minimum is not None else workers,
        "maxReplicas": workers,
        "rayStartParams": {},
        "template": pod_template(gpus),
    }
    return {
        "headGroupSpec": {"rayStartParams": {}, "template": pod_template(None)},
        "workerGroupSpecs": [group],
    }


def raycluster(
    namespace: str,
    name: str,
    queue: str,
    *,
    workers: int = 2,
    gpus: int = 2,
    minimum: int | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": meta(namespace, name, queue),
        "spec": {"suspend": True, **_ray_cluster_spec(workers, gpus, minimum)},
    }


def rayjob(
    namespace: str, name: str, queue: str, *, workers: int = 2, gpus: int = 2
) -> dict[str, Any]:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": meta(namespace, name, queue),
        "spec": {
            "suspend": True,
            "entrypoint": "python train.py",
            "shutdownAfterJobFinishes": True,
            "rayClusterSpec": _ray_cluster_spec(workers, gpus, None),
        },
    }


def batch_job(
    namespace: str, name: str, queue: str, *, parallelism: int = 2, gpus: int = 4, **meta_extra: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": meta(namespace, name, queue, **meta_extra),
        "spec": {
            "suspend": True,
            "parallelism": parallelism,
            "completions": parallelism,
            "template": pod_template(gpus),
        },
    }


# kind -> (plural.group of its vendored CRD, builder with an 8-GPU default shape)
CRD_OF = {
    "JobSet": "jobsets.jobset.x-k8s.io",
    "PyTorchJob": "pytorchjobs.kubeflow.org",
    "RayCluster": "rayclusters.ray.io",
    "RayJob": "rayjobs.ray.io",
}


def eight_gpus(kind: str, namespace: str, name: str, queue: str) -> dict[str, Any]:
    """An object of ``kind`` that holds 8 GPUs once it runs."""
    if kind == "JobSet":
        return jobset(namespace, name, queue, replicas=2, gpus=4)
    if kind == "PyTorchJob":
        return pytorchjob(namespace, name, queue, workers=3, gpus=2)
    if kind == "RayCluster":
        return raycluster(namespace, name, queue, workers=2, gpus=4)
    if kind == "RayJob":
        return rayjob(namespace, name, queue, workers=2, gpus=4)
    return batch_job(namespace, name, queue, parallelism=2, gpus=4)


def finished(kind: str, failed: bool = False) -> dict[str, Any]:
    """The status its operator writes when it ends."""
    if kind in ("RayJob",):
        return {
            "jobDeploymentStatus": "Failed" if failed else "Complete",
            "jobStatus": "FAILED" if failed else "SUCCEEDED",
        }
    condition = {
        "JobSet": "Completed",
        "PyTorchJob": "Succeeded",
    }[kind]
    return {
        "conditions": [
            {
                "type": "Failed" if failed else condition,
                "status": "True",
                "reason": "Done",
                "message": "done",
                "lastTransitionTime": "2026-12-02T00:00:00Z",
            }
        ]
    }
