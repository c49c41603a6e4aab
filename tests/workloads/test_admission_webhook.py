"""The mutating admission webhook: a queue Job created running is stored suspended, so
its pods never start outside the queue. The local API server calls Tidegate's endpoint
(served on a local port) on every Job create, as a real one does."""

from __future__ import annotations

import base64
import json
import threading
from collections.abc import Iterator
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import pytest
from django.core.wsgi import get_wsgi_application

from scheduler_bridge.gateways.admission_webhook import review_response
from tests.bridge.conftest import FakeCluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def webhook_url() -> Iterator[str]:
    """Tidegate's WSGI application on a free local port (the endpoint reads no rows, so
    it needs no transactional database the way Django's live server would)."""
    server = make_server("127.0.0.1", 0, get_wsgi_application(), handler_class=_Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}{PATH}"
    finally:
        server.shutdown()
        server.server_close()


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib name
        return


PATH = "/webhooks/v1/jobs/suspend"


def job(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": "vision-train", "labels": labels},
        "spec": {
            **spec,
            "template": {
                "spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}
            },
        },
    }


def test_a_queue_job_created_running_is_stored_suspended(
    fake_cluster: FakeCluster, webhook_url: str
) -> None:
    api = fake_cluster.api
    api.register_mutating_webhook(webhook_url, "tidegate.io/queue")

    api.create_object(job("queued", {"tidegate.io/queue": "vision"}))
    api.create_object(job("explicit", {"tidegate.io/queue": "vision"}, suspend=False))
    api.create_object(job("mine", {"team": "vision"}))

    def suspended(name: str) -> bool:
        stored = api.get_object("Job", "vision-train", name)
        assert stored is not None
        return bool(stored["spec"]["suspend"])

    assert suspended("queued") and suspended("explicit") and not suspended("mine")


def test_with_failure_policy_fail_an_unreachable_webhook_refuses_the_create(
    fake_cluster: FakeCluster,
) -> None:
    api = fake_cluster.api
    api.register_mutating_webhook("http://127.0.0.1:9" + PATH, "tidegate.io/queue", timeout_s=1)
    with pytest.raises(Exception, match="failed calling webhook"):
        api.create_object(job("queued", {"tidegate.io/queue": "vision"}))
    assert api.get_object("Job", "vision-train", "queued") is None


def test_the_endpoint_answers_admission_reviews_and_400_for_anything_else(client) -> None:
    review: dict[str, Any] = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "kind": {"group": "batch", "version": "v1", "kind": "Job"},
            "operation": "CREATE",
            "object": job("queued", {"tidegate.io/queue": "vision"}),
        },
    }
    answer = client.post(PATH, review, content_type="application/json").json()["response"]
    assert answer["uid"] == "705ab4f5-6393-11e8-b7cc-42010a800002" and answer["allowed"]
    assert json.loads(base64.b64decode(answer["patch"])) == [
        {"op": "add", "path": "/spec/suspend", "value": True}
    ]
    suspended = dict(review, request={**review["request"], "object": job("q", {}, suspend=True)})
    assert "patch" not in review_response(suspended)["response"]
    for bad in ({"kind": "Pod"}, {**review, "apiVersion": "admission.k8s.io/v1beta1"}):
        response = client.post(PATH, bad, content_type="application/json")
        assert response.status_code == 400 and "AdmissionReview" in response.json()["detail"]
    assert client.get(PATH).status_code == 405


def pod_review(labels: dict[str, str], *, gpus: int = 1, **meta: Any) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "i", "resources": resources}]}
    spec.update(meta.pop("spec", {}))
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "object": {"metadata": {"name": "p", "labels": labels, **meta}, "spec": spec},
        },
    }


def patch_of(review: dict[str, Any]) -> list[dict[str, Any]]:
    answer = review_response(review)["response"]
    assert answer["allowed"]
    return json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else []


def test_queue_gpu_pods_are_gated_unless_a_suspendable_kind_owns_them() -> None:
    queue = {"tidegate.io/queue": "vision"}
    gate = {"name": "tidegate.io/admission"}
    assert patch_of(pod_review(queue)) == [
        {"op": "add", "path": "/spec/schedulingGates", "value": [gate]}
    ]
    # another gate already there: ours is added beside it
    other = pod_review(queue, spec={"schedulingGates": [{"name": "example.com/wait"}]})
    assert patch_of(other) == [{"op": "add", "path": "/spec/schedulingGates/-", "value": gate}]
    assert patch_of(pod_review({})) == []  # not queue work
    assert patch_of(pod_review(queue, gpus=0)) == []  # no GPU: nothing to queue
    # GPUs through ResourceClaims (docs/dra.md): queued as well
    claiming = pod_review(
        queue, gpus=0, spec={"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "t"}]}
    )
    assert patch_of(claiming) == [{"op": "add", "path": "/spec/schedulingGates", "value": [gate]}]
    for owner in ("Job", "PyTorchJob", "RayCluster"):  # held by their own suspend
        owned = pod_review(
            queue, ownerReferences=[{"kind": owner, "name": "x", "uid": "1", "controller": True}]
        )
        assert patch_of(owned) == []
    replica_set = pod_review(
        queue, ownerReferences=[{"kind": "ReplicaSet", "name": "x", "uid": "1", "controller": True}]
    )
    assert patch_of(replica_set)[0]["value"] == [gate]


def test_a_queue_pod_created_through_the_api_server_is_stored_gated(
    fake_cluster: FakeCluster, webhook_url: str
) -> None:
    api = fake_cluster.api
    api.register_mutating_webhook(webhook_url, "tidegate.io/queue")
    api.create_object(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": "serve",
                "namespace": "vision-train",
                "labels": {"tidegate.io/queue": "vision"},
            },
            "spec": {
                "containers": [
                    {"name": "s", "image": "i", "resources": {"limits": {"nvidia.com/gpu": "1"}}}
                ]
            },
        }
    )
    stored = api.get_object("Pod", "vision-train", "serve")
    assert stored is not None
    assert stored["spec"]["schedulingGates"] == [{"name": "tidegate.io/admission"}]
