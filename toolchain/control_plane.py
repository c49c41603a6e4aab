"""A real Kubernetes control plane on loopback: etcd, kube-apiserver, kube-controller-manager,
kube-scheduler and KWOK, built by ``toolchain.build`` and run as plain processes.

The test suite starts one per run (``tests/kube_real/``); a person starts one by hand with::

    python -m toolchain.control_plane up      # prints the kubeconfig to use, runs until Ctrl-C

It is the cluster of Tidegate's real-cluster tests, not a production set-up: authentication
is by static tokens, the components themselves are cluster administrators, and etcd does
not sync to disk. Everything else is the release's own: RBAC, ServiceAccount tokens, the
ResourceQuota and webhook admission plugins, the default feature gates, the job, quota,
namespace, garbage-collection and service-account controllers, the scheduler, and nodes
whose pods KWOK runs and finishes without containers. See docs/kubernetes.md.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from toolchain.admin import AdminClient, WaitTimedOut, wait_until
from toolchain.build import (
    MODULE_FILES,
    ToolchainError,
    binaries_folder,
    build_all,
    files_folder,
    modules,
)

# The controllers the tests rely on (names as kube-controller-manager --controllers takes them).
CONTROLLERS = (
    "job-controller",
    "resourcequota-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "deployment-controller",
    "replicaset-controller",
    "statefulset-controller",
    "pod-garbage-collector-controller",
    "clusterrole-aggregation-controller",
    # removes the not-ready taint the API server puts on every new node once it is Ready
    "node-lifecycle-controller",
    "resourceclaim-controller",
)
# Those that keep namespaces and their service accounts, for a plane that runs no pods.
NAMESPACE_CONTROLLERS = (
    "namespace-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "root-ca-certificate-publisher-controller",
    "clusterrole-aggregation-controller",
)
# Admission plugins switched on explicitly (the release's defaults are on as well).
ADMISSION_PLUGINS = (
    "NamespaceLifecycle",
    "ServiceAccount",
    "ResourceQuota",
    "MutatingAdmissionWebhook",
    "ValidatingAdmissionWebhook",
)
# The label KWOK looks for: only nodes carrying it are played by KWOK.
KWOK_NODE_LABEL = ("type", "kwok")
START_TIMEOUT_S = 120.0


def _die_with_parent() -> None:
    """Ask Linux to kill the component when the process that started it ends, however it
    ends: a control plane never outlives its test run. (SIGKILL, not SIGTERM: etcd gets
    the signal at the same moment, and an API server shutting down gracefully without
    its etcd may wait forever, holding half a gigabyte.)"""
    try:
        import ctypes

        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL)
    except OSError:
        pass


class ControlPlaneError(RuntimeError):
    """A component did not start; the message names it, its log and what to try."""


def write_secret(path: Path, text: str) -> None:
    """Write ``text`` to a file only its owner may read, from the first byte on."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(text)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Component:
    name: str
    command: list[str]
    log: Path
    process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        out = self.log.open("ab")
        self.process = subprocess.Popen(
            self.command,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - only a prctl call
        )
        out.close()

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def stop(self, grace_s: float = 10.0) -> None:
        if not self.running():
            return
        assert self.process is not None
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


@dataclass
class ControlPlane:
    """The processes of one control plane and the files they share, under ``workdir``."""

    workdir: Path
    etcd_port: int = 0
    etcd_peer_port: int = 0
    apiserver_port: int = 0
    admin_token: str = ""
    gateway_token: str = ""
    components: dict[str, Component] = field(default_factory=dict)
    binaries: dict[str, Path] = field(default_factory=dict)
    _admin: AdminClient | None = field(default=None, repr=False, compare=False)

    # --- where things are ------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def admin(self) -> AdminClient:
        """Requests to the API server as its administrator."""
        if self._admin is None:
            self._admin = AdminClient(self.url, self.ca_file, self.admin_token)
        return self._admin

    @property
    def etcd_url(self) -> str:
        return f"http://127.0.0.1:{self.etcd_port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def admin_kubeconfig(self) -> Path:
        return self.workdir / "admin.kubeconfig"

    @property
    def gateway_kubeconfig(self) -> Path:
        """Tidegate's own user (``tidegate``, a cluster administrator): the audit log
        records its every request, so tests can count what it wrote."""
        return self.workdir / "tidegate.kubeconfig"

    @property
    def audit_log(self) -> Path:
        return self.workdir / "logs" / "audit.log"

    def binary(self, name: str) -> str:
        return str(self.binaries[name])

    # --- life cycle ------------------------------------------------------------------------

    @classmethod
    def prepare(cls, workdir: Path) -> ControlPlane:
        """Build (or find) the binaries and lay out certificates, keys and tokens."""
        workdir.mkdir(parents=True, exist_ok=True)
        try:
            folders = build_all(["kubernetes", "etcd", "kwok"])
        except ToolchainError as error:
            raise ControlPlaneError(f"the control plane's binaries are missing: {error}") from error
        binaries: dict[str, Path] = {}
        kwok_stages: list[Path] = []
        for module in modules():
            if module.name in folders:
                for tool in module.tools:
                    name = module.binary_name(tool)
                    binaries[name] = binaries_folder(module) / name
                if module.name == "kwok":
                    kwok_stages = [files_folder(module) / f for f in MODULE_FILES["kwok"][1]]
        plane = cls(
            workdir=workdir,
            etcd_port=free_port(),
            etcd_peer_port=free_port(),
            apiserver_port=free_port(),
            admin_token=secrets.token_hex(16),
            gateway_token=secrets.token_hex(16),
            binaries=binaries,
        )
        plane._write_pki()
        plane._write_tokens()
        plane._write_kubeconfig(plane.admin_kubeconfig, "admin", plane.admin_token)
        plane._write_kubeconfig(plane.gateway_kubeconfig, "tidegate", plane.gateway_token)
        plane._write_audit_policy()
        plane._write_kwok_config(kwok_stages)
        return plane

    def start(self, *, pods: bool = True) -> None:
        """Start every component; with ``pods`` off, the API server and etcd with only
        the controllers that keep namespaces and service accounts (the footing of
        Kueue's envtest-based performance test): nothing creates, schedules or runs
        pods."""
        try:
            self._start_etcd()
            self._start_apiserver()
            self._start_controllers(pods)
            self.wait_for_default_service_account("default")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop every component, the API server's clients first and etcd last."""
        core = ("kube-apiserver", "etcd")
        for name in [n for n in reversed(self.components) if n not in core] + list(core):
            component = self.components.get(name)
            if component is not None:
                component.stop()

    def start_component(self, name: str, command: list[str]) -> Component:
        """Run another program beside the control plane (a framework's controller); it is
        stopped with the control plane and logs into the same folder."""
        return self._component(name, command)

    def restart_apiserver(self) -> None:
        """Stop the API server and start it again on the same port (watches break, the
        watch cache is rebuilt from etcd), as an upgrade or a crash would."""
        self.components["kube-apiserver"].stop()
        self._start_apiserver()

    def compact_etcd(self) -> int:
        """Compact etcd's history up to its current revision; return that revision."""
        status = self._etcd_call("/v3/kv/range", {"key": "AA==", "limit": 1})
        revision = int(status["header"]["revision"])
        self._etcd_call("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    def state(self) -> dict[str, Any]:
        """What another process needs to use this control plane (see ``attach``)."""
        return {
            "workdir": str(self.workdir),
            "url": self.url,
            "etcd_url": self.etcd_url,
            "etcd_port": self.etcd_port,
            "etcd_peer_port": self.etcd_peer_port,
            "apiserver_port": self.apiserver_port,
            "admin_token": self.admin_token,
            "gateway_token": self.gateway_token,
            "admin_kubeconfig": str(self.admin_kubeconfig),
            "ca_file": str(self.ca_file),
            "binaries": {k: str(v) for k, v in self.binaries.items()},
            "pids": {
                name: c.process.pid for name, c in self.components.items() if c.process is not None
            },
        }

    @classmethod
    def attach(cls, state: Mapping[str, Any]) -> ControlPlane:
        """The control plane another process started and described with ``state()``."""
        return cls(
            workdir=Path(state["workdir"]),
            etcd_port=state["etcd_port"],
            etcd_peer_port=state["etcd_peer_port"],
            apiserver_port=state["apiserver_port"],
            admin_token=state["admin_token"],
            gateway_token=state["gateway_token"],
            binaries={k: Path(v) for k, v in state["binaries"].items()},
        )

    # --- kubeconfigs and tokens ------------------------------------------------------------

    def write_kubeconfig(self, path: Path, user: str, token: str) -> Path:
        self._write_kubeconfig(path, user, token)
        return path

    def _write_kubeconfig(self, path: Path, user: str, token: str) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "tidegate-test",
                    "cluster": {"server": self.url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": user, "user": {"token": token}}],
            "contexts": [{"name": user, "context": {"cluster": "tidegate-test", "user": user}}],
            "current-context": user,
        }
        write_secret(path, json.dumps(config, indent=2))

    def _write_tokens(self) -> None:
        # token,user,uid,"groups": every component is an administrator of this test cluster.
        rows = [
            f'{self.admin_token},admin,admin,"system:masters"',
            f'{self.gateway_token},tidegate,tidegate,"system:masters"',
        ]
        for component in ("kube-controller-manager", "kube-scheduler", "kwok"):
            token = secrets.token_hex(16)
            rows.append(f'{token},system:{component},{component},"system:masters"')
            self._write_kubeconfig(self.workdir / f"{component}.kubeconfig", component, token)
        write_secret(self.workdir / "tokens.csv", "\n".join(rows) + "\n")

    def _write_kwok_config(self, stages: list[Path]) -> None:
        """KWOK's configuration: its own default stages, from the pinned module. Nodes
        become ready and renew a Lease; pods become ready, Job pods finish a few seconds
        later (unless their template delays it, see ``tests/kube_real``), deleted pods go."""
        documents = [stage.read_text().strip() for stage in stages]
        (self.workdir / "kwok.yaml").write_text("\n---\n".join(documents) + "\n")

    def _write_audit_policy(self) -> None:
        # Every request of Tidegate's user and of service accounts, at metadata level.
        policy = {
            "apiVersion": "audit.k8s.io/v1",
            "kind": "Policy",
            "omitStages": ["RequestReceived"],
            "rules": [
                {"level": "Metadata", "users": ["tidegate"]},
                {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
                {"level": "None"},
            ],
        }
        (self.workdir / "audit-policy.json").write_text(json.dumps(policy))

    def issue_serving_certificate(self, name: str, folder: Path) -> tuple[Path, Path]:
        """A serving certificate for 127.0.0.1 signed by this control plane's CA, such as
        a webhook's (the API server trusts it through the ``caBundle`` of ``ca_file``);
        returns (certificate, key)."""
        pki = self.workdir / "pki"
        folder.mkdir(parents=True, exist_ok=True)
        cert, key, csr = folder / f"{name}.crt", folder / f"{name}.key", folder / f"{name}.csr"
        ext = folder / f"{name}.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n")
        openssl = shutil.which("openssl") or "openssl"
        subprocess.run(
            [openssl, "req", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out",
             str(csr), "-subj", f"/CN={name}"],
            check=True, capture_output=True,
        )  # fmt: skip
        subprocess.run(
            [openssl, "x509", "-req", "-in", str(csr), "-CA", str(pki / "ca.crt"), "-CAkey",
             str(pki / "ca.key"), "-CAcreateserial", "-out", str(cert), "-days", "2",
             "-extfile", str(ext)],
            check=True, capture_output=True,
        )  # fmt: skip
        return cert, key

    def _write_pki(self) -> None:
        pki = self.workdir / "pki"
        pki.mkdir(exist_ok=True)
        if (pki / "serving.crt").exists():
            return
        openssl = shutil.which("openssl")
        if not openssl:
            raise ControlPlaneError("openssl is needed for the test cluster's certificates")

        def run(*args: str) -> None:
            subprocess.run([openssl, *args], cwd=pki, check=True, capture_output=True)

        run(
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out",
            "ca.crt", "-days", "30", "-subj", "/CN=tidegate-test-ca",
        )  # fmt: skip
        (pki / "serving.ext").write_text(
            "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes,"
            "DNS:kubernetes.default,DNS:kubernetes.default.svc\n"
            "extendedKeyUsage=serverAuth\n"
        )
        run(
            "req", "-newkey", "rsa:2048", "-nodes", "-keyout", "serving.key", "-out",
            "serving.csr", "-subj", "/CN=kube-apiserver",
        )  # fmt: skip
        run(
            "x509", "-req", "-in", "serving.csr", "-CA", "ca.crt", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "serving.crt", "-days", "30", "-extfile", "serving.ext",
        )  # fmt: skip
        run("genrsa", "-out", "sa.key", "2048")
        run("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub")

    # --- the components --------------------------------------------------------------------

    def _component(self, name: str, command: list[str]) -> Component:
        logs = self.workdir / "logs"
        logs.mkdir(exist_ok=True)
        component = Component(name, command, logs / f"{name}.log")
        self.components[name] = component
        component.start()
        return component

    def _start_etcd(self) -> None:
        data = self.workdir / "etcd"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        component = self._component(
            "etcd",
            [
                self.binary("etcd"),
                "--name=tidegate-test",
                f"--data-dir={data}",
                f"--listen-client-urls={self.etcd_url}",
                f"--advertise-client-urls={self.etcd_url}",
                f"--listen-peer-urls={peer}",
                f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=tidegate-test={peer}",
                "--unsafe-no-fsync",
                "--log-level=warn",
            ],
        )
        self._wait(component, lambda: self._etcd_healthy())

    def _start_apiserver(self) -> None:
        pki = self.workdir / "pki"
        component = self._component(
            "kube-apiserver",
            [
                self.binary("kube-apiserver"),
                f"--etcd-servers={self.etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.apiserver_port}",
                f"--tls-cert-file={pki / 'serving.crt'}",
                f"--tls-private-key-file={pki / 'serving.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--token-auth-file={self.workdir / 'tokens.csv'}",
                "--authorization-mode=RBAC",
                "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                "--service-cluster-ip-range=10.96.0.0/16",
                f"--enable-admission-plugins={','.join(ADMISSION_PLUGINS)}",
                "--allow-privileged=true",
                # the kubernetes Service cannot point at a loopback address
                "--endpoint-reconciler-type=none",
                f"--audit-policy-file={self.workdir / 'audit-policy.json'}",
                f"--audit-log-path={self.audit_log}",
                "--audit-log-mode=blocking",
                "--audit-log-format=json",
                "--profiling=false",
                "--v=1",
            ],
        )
        self._wait(component, self._apiserver_ready)

    def _start_controllers(self, pods: bool = True) -> None:
        pki = self.workdir / "pki"
        controllers = CONTROLLERS if pods else NAMESPACE_CONTROLLERS
        kcm_config = self.workdir / "kube-controller-manager.kubeconfig"
        kcm = self._component(
            "kube-controller-manager",
            [
                self.binary("kube-controller-manager"),
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                f"--controllers={','.join(controllers)}",
                f"--service-account-private-key-file={pki / 'sa.key'}",
                f"--root-ca-file={pki / 'ca.crt'}",
                "--use-service-account-credentials=false",
                "--v=1",
            ],
        )
        if not pods:
            self._wait(kcm, lambda: True, settle_s=0.5)
            return
        scheduler_config = self.workdir / "kube-scheduler.kubeconfig"
        scheduler = self._component(
            "kube-scheduler",
            [
                self.binary("kube-scheduler"),
                f"--kubeconfig={scheduler_config}",
                f"--authentication-kubeconfig={scheduler_config}",
                f"--authorization-kubeconfig={scheduler_config}",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--v=1",
            ],
        )
        key, value = KWOK_NODE_LABEL
        kwok = self._component(
            "kwok",
            [
                self.binary("kwok"),
                f"--kubeconfig={self.workdir / 'kwok.kubeconfig'}",
                "--manage-all-nodes=false",
                f"--manage-nodes-with-label-selector={key}={value}",
                f"--config={self.workdir / 'kwok.yaml'}",
                "--node-lease-duration-seconds=40",
                "--server-address=",
                "--v=INFO",
            ],
        )
        for component in (kcm, scheduler, kwok):
            self._wait(component, lambda: True, settle_s=0.5)

    # --- readiness -------------------------------------------------------------------------

    def _wait(self, component: Component, ready: Any, settle_s: float = 0.0) -> None:
        time.sleep(settle_s)

        def started() -> bool:
            if not component.running():
                raise ControlPlaneError(
                    f"{component.name} exited during start (log {component.log}):\n"
                    f"{component.log_tail()}"
                )
            return bool(ready())

        try:
            wait_until(
                started,
                f"{component.name} to be ready",
                START_TIMEOUT_S,
                interval_s=0.2,
                tolerated=(OSError,),
            )
        except WaitTimedOut as timed_out:
            raise ControlPlaneError(
                f"{timed_out} (log {component.log}):\n{component.log_tail()}"
            ) from None

    def _etcd_healthy(self) -> bool:
        with urllib.request.urlopen(f"{self.etcd_url}/health", timeout=2) as answer:  # noqa: S310
            return bool(json.load(answer).get("health") == "true")

    def _etcd_call(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(  # noqa: S310
            f"{self.etcd_url}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310
            result: dict[str, Any] = json.load(answer)
            return result

    def _apiserver_ready(self) -> bool:
        status, _ = self.admin.call("GET", "/readyz", timeout_s=5)
        return status == 200

    def wait_for_default_service_account(self, namespace: str, timeout_s: float = 60) -> None:
        """Pods cannot be created in a namespace before the service-account controller made
        its ``default`` ServiceAccount (the ServiceAccount admission plugin refuses them)."""
        path = f"/api/v1/namespaces/{namespace}/serviceaccounts/default"
        try:
            wait_until(
                lambda: self.admin.call("GET", path, timeout_s=5)[0] == 200,
                f"the ServiceAccount {namespace}/default",
                timeout_s,
            )
        except WaitTimedOut as timed_out:
            log = self.components.get("kube-controller-manager", Component("", [], Path())).log
            raise ControlPlaneError(
                f"{timed_out}: is kube-controller-manager running? (log {log})"
            ) from None


@contextmanager
def running(workdir: Path) -> Iterator[ControlPlane]:
    plane = ControlPlane.prepare(workdir)
    plane.start()
    try:
        yield plane
    finally:
        plane.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Run a local Kubernetes control plane.")
    parser.add_argument("action", choices=["up"])
    parser.add_argument(
        "--workdir",
        type=Path,
        help="an empty folder for certificates, etcd's data and the logs "
        "(default: a new private folder under the temporary directory)",
    )
    args = parser.parse_args(argv)
    if args.workdir is None:
        args.workdir = Path(tempfile.mkdtemp(prefix="tidegate-control-plane-"))
    elif args.workdir.exists() and any(args.workdir.iterdir()):
        print(f"error: {args.workdir} is not empty; name an empty or new folder", file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt))
    try:
        with running(args.workdir) as plane:
            write_secret(plane.workdir / "state.json", json.dumps(plane.state()))
            print(f"control plane up at {plane.url}")
            print(f"export KUBECONFIG={plane.admin_kubeconfig}")
            print(f"logs in {plane.workdir / 'logs'}; Ctrl-C stops it")
            print(
                "frameworks: python -m toolchain.frameworks "
                f"--state {plane.workdir / 'state.json'} [jobset] [kuberay]"
            )
            try:
                while all(c.running() for c in plane.components.values()):
                    time.sleep(1)
                stopped = [n for n, c in plane.components.items() if not c.running()]
                print(f"stopped by itself: {', '.join(stopped)}", file=sys.stderr)
                return 1
            except KeyboardInterrupt:
                return 0
    except ControlPlaneError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
