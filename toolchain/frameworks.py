"""The workload frameworks' own controllers on a running control plane: their CRDs, taken
from the same pinned Go module as the controller, and the controller as a process beside
the control plane (with its admission webhooks registered where it has them), so suspend,
resume and scaling of JobSets and Ray clusters are the frameworks' own.

Used by the real-cluster tests (``tests/real_cluster/test_frameworks.py``) and by hand::

    python -m toolchain.frameworks --state <folder of a control plane>/state.json
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from toolchain.admin import WaitTimedOut, wait_until
from toolchain.build import MODULE_FILES, build_all, files_folder, modules
from toolchain.control_plane import (
    Component,
    ControlPlane,
    ControlPlaneError,
    free_port,
    write_secret,
)

# The framework -> the CRDs Tidegate queues (group, plural) once installed.
SERVED = {
    "jobset": [("jobset.x-k8s.io", "jobsets")],
    "kuberay": [("ray.io", "rayclusters"), ("ray.io", "rayjobs")],
    "lws": [("leaderworkerset.x-k8s.io", "leaderworkersets")],
    "kubeflow": [("kubeflow.org", "pytorchjobs")],
}


def _module(name: str) -> Any:
    build_all([name], quiet=True)
    (module,) = [m for m in modules() if m.name == name]
    return module


def _files(name: str) -> list[Path]:
    module = _module(name)
    return [files_folder(module) / f for f in MODULE_FILES[name][1] if "webhook" not in f]


def _binary(name: str) -> str:
    module = _module(name)
    (tool,) = module.tools
    return str(files_folder(module).parent / "bin" / module.binary_name(tool))


def install_crds(plane: ControlPlane, name: str) -> None:
    """Create the framework's CRDs (kept when they exist) and wait until they are served."""
    for path in _files(name):
        for document in yaml.safe_load_all(path.read_text()):
            if document and document.get("kind") == "CustomResourceDefinition":
                status, body = plane.admin.call("POST", _CRD_PATH, document)
                if status not in (201, 409):
                    raise ControlPlaneError(f"installing {path.name} failed: {status} {body}")
    for group, plural in SERVED[name]:
        crd = f"{plural}.{group}"
        _wait(partial(_established, plane, crd), f"the {crd} CRD to be established")


_CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def _established(plane: ControlPlane, crd: str) -> bool:
    status, body = plane.admin.call("GET", f"{_CRD_PATH}/{crd}")
    conditions = body.get("status", {}).get("conditions") or [] if status == 200 else []
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


def _wait(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    try:
        wait_until(check, what, timeout_s, interval_s=0.2, tolerated=(OSError,))
    except WaitTimedOut as timed_out:
        raise ControlPlaneError(str(timed_out)) from None


def start_jobset(plane: ControlPlane) -> Component:
    """JobSet's controller manager with its webhooks, which the API server calls over TLS
    (a certificate of the control plane's CA; the registrations are JobSet's own, pointed at
    the local port instead of its in-cluster Service)."""
    install_crds(plane, "jobset")
    folder = plane.workdir / "jobset"
    cert, key = plane.issue_serving_certificate("jobset-webhook", folder / "certs")
    (folder / "certs" / "tls.crt").write_bytes(cert.read_bytes())
    write_secret(folder / "certs" / "tls.key", key.read_text())
    port, probe = free_port(), free_port()
    config = {
        "apiVersion": "config.jobset.x-k8s.io/v1alpha1",
        "kind": "Configuration",
        "internalCertManagement": {"enable": False},
        "webhook": {"port": port, "host": "127.0.0.1", "certDir": str(folder / "certs")},
        "metrics": {"bindAddress": "0"},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{probe}"},
        "leaderElection": {"leaderElect": False},
    }
    (folder / "config.yaml").write_text(yaml.safe_dump(config))
    component = plane.start_component(
        "jobset",
        [
            _binary("jobset"),
            f"--kubeconfig={plane.admin_kubeconfig}",
            f"--config={folder / 'config.yaml'}",
            "--zap-devel=false",
        ],
    )
    _wait(lambda: _healthy(f"http://127.0.0.1:{probe}/readyz"), "JobSet's controller")
    webhooks = module_file("jobset", "config/components/webhook/manifests.yaml")
    _register_webhooks(plane, webhooks, f"https://127.0.0.1:{port}", "jobset-")
    return component


def start_kuberay(plane: ControlPlane) -> Component:
    """KubeRay's operator (no webhooks: KubeRay serves none by default)."""
    install_crds(plane, "kuberay")
    probe = free_port()
    component = plane.start_component(
        "kuberay",
        [
            _binary("kuberay"),
            f"--kubeconfig={plane.admin_kubeconfig}",
            "--metrics-addr=0",
            f"--health-probe-bind-address=127.0.0.1:{probe}",
            "--enable-leader-election=false",
        ],
    )
    _wait(lambda: _healthy(f"http://127.0.0.1:{probe}/readyz"), "KubeRay's operator")
    return component


def module_file(name: str, relative: str) -> Path:
    return files_folder(_module(name)) / relative


def _healthy(url: str) -> bool:
    with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 - loopback
        return bool(answer.status == 200)


def _register_webhooks(plane: ControlPlane, manifests: Path, base_url: str, prefix: str) -> None:
    ca_bundle = base64.b64encode(plane.ca_file.read_bytes()).decode()
    for document in yaml.safe_load_all(manifests.read_text()):
        if not document:
            continue
        document["metadata"]["name"] = prefix + document["metadata"]["name"]
        for webhook in document.get("webhooks") or []:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"{base_url}{path}", "caBundle": ca_bundle}
        plural = {
            "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
            "ValidatingWebhookConfiguration": "validatingwebhookconfigurations",
        }[document["kind"]]
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}"
        plane.admin.call("DELETE", f"{path}/{document['metadata']['name']}", {})  # an older one
        status, body = plane.admin.call("POST", path, document)
        if status != 201:
            raise ControlPlaneError(f"registering {document['metadata']['name']}: {body}")


STARTERS = {"jobset": start_jobset, "kuberay": start_kuberay}


def stop_framework(plane: ControlPlane, name: str) -> None:
    """Unregister the framework's webhooks (so no later create waits on a controller that
    is gone) and stop its controller; its CRDs stay."""
    for plural in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations"):
        status, listed = plane.admin.call("GET", f"/apis/admissionregistration.k8s.io/v1/{plural}")
        for item in listed.get("items", []) if status == 200 else []:
            if item["metadata"]["name"].startswith(f"{name}-"):
                plane.admin.call(
                    "DELETE",
                    f"/apis/admissionregistration.k8s.io/v1/{plural}/{item['metadata']['name']}",
                    {},
                )
    component = plane.components.pop(name, None)
    if component is not None:
        component.stop()


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--state", type=Path, required=True, help="a control plane's state.json")
    parser.add_argument("frameworks", nargs="*", default=sorted(STARTERS))
    args = parser.parse_args()
    plane = ControlPlane.attach(json.loads(args.state.read_text()))
    for name in args.frameworks:
        STARTERS[name](plane)
        print(f"{name} running")
    try:
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        plane.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
