"""What the deployment relies on: probes that answer whatever the Host header and the
HTTPS redirect, and a chart whose pods run locked down with the least access."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml
from django.test import Client

from tests.kube_real.chart import CHART


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/healthz", "/readyz"])
def test_probes_answer_the_kubelet_by_pod_ip_over_plain_http(settings, path: str) -> None:
    settings.ALLOWED_HOSTS = ["tidegate.example.com"]
    settings.SECURE_SSL_REDIRECT = True
    kubelet = Client(HTTP_HOST="10.244.1.17:8000")
    assert kubelet.get(path).status_code == 200
    # an ordinary page is what the probes used to hit: 301 to https, or 400 for the host
    assert kubelet.get("/accounts/login/").status_code in (301, 400)


def test_readiness_fails_while_the_database_is_unreachable(monkeypatch) -> None:
    from django.db import DatabaseError, connection

    def down() -> None:
        raise DatabaseError("connection refused")

    monkeypatch.setattr(connection, "ensure_connection", down)
    response = Client().get("/readyz")
    assert response.status_code == 503 and response.json()["checks"]["database"] != "ok"


def _template(name: str) -> str:
    return (CHART / "templates" / name).read_text()


def test_only_the_workers_and_the_queue_watch_carry_the_cluster_service_account() -> None:
    web = _template("web.yaml")
    workers, beat = _template("workers.yaml").split("\n---\n")
    assert "serviceAccountName" not in web and "automountServiceAccountToken: false" in web
    assert "serviceAccountName: {{ .Values.serviceAccount.name }}" in workers
    assert "serviceAccountName: {{ .Values.serviceAccount.name }}" in _template("watch.yaml")
    assert "automountServiceAccountToken: false" in beat
    assert "/healthz" in web and "/readyz" in web and "/accounts/login/" not in web


def test_every_pod_and_container_runs_locked_down() -> None:
    helpers = _template("_helpers.tpl")
    for setting in (
        "runAsNonRoot: true",
        "runAsUser: 10001",
        "seccompProfile: {type: RuntimeDefault}",
        "allowPrivilegeEscalation: false",
        "readOnlyRootFilesystem: true",
    ):
        assert setting in helpers
    pods = [
        _template("web.yaml"),
        *_template("workers.yaml").split("\n---\n"),
        _template("watch.yaml"),
        _template("migrate-job.yaml"),
    ]
    for pod in pods:
        assert 'include "tidegate.podSecurity"' in pod
        containers = pod.count("image:")
        locked = pod.count('include "tidegate.containerSecurity"')
        locked += pod.count("readOnlyRootFilesystem: true")  # spelt out (extra mounts)
        assert locked == containers
    assert "USER 10001" in (CHART.parents[1] / "Dockerfile").read_text()


def test_the_charts_cluster_role_matches_platform_rbac() -> None:
    rbac = [d for d in yaml.safe_load_all((CHART.parents[1] / "rbac.yaml").read_text()) if d]
    cluster_role = next(d for d in rbac if d["kind"] == "ClusterRole")
    template = _template("serviceaccount.yaml")
    start = template.index("rules:\n", template.index("kind: ClusterRole"))
    end = template.index("---", start)
    chart_rules = yaml.safe_load(template[start:end])["rules"]
    assert chart_rules == cluster_role["rules"]
    assert "kind: Role\n" in template and 'resourceNames: ["tidegate-mig-config"]' in template


def test_the_webhook_is_registered_for_queue_job_creates_only() -> None:
    configuration = _template("webhook.yaml").split("\n---\n")[0]
    webhook = yaml.safe_load(
        "\n".join(
            line
            for line in configuration.splitlines()
            if "{{-" not in line and "{{ .Values.webhook.failurePolicy }}" not in line
        )
        .replace("{{", "")
        .replace("}}", "")
    )
    hook = webhook["webhooks"][0]
    assert hook["admissionReviewVersions"] == ["v1"] and hook["sideEffects"] == "None"
    assert hook["rules"] == [
        {
            "apiGroups": ["batch"],
            "apiVersions": ["v1"],
            "operations": ["CREATE"],
            "resources": ["jobs"],
            "scope": "Namespaced",
        }
    ]
    assert hook["objectSelector"]["matchExpressions"] == [
        {"key": "tidegate.io/queue", "operator": "Exists"}
    ]
    assert hook["clientConfig"]["service"]["path"] == "/webhooks/v1/jobs/suspend"
    assert "failurePolicy: {{ .Values.webhook.failurePolicy }}" in _template("webhook.yaml")


def _values() -> dict[str, Any]:
    values: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
    return values


def test_migrations_run_once_per_release_in_a_hook_job_not_in_every_web_pod() -> None:
    assert "initContainers" not in _template("web.yaml")
    assert "migrate" not in _template("workers.yaml")
    # included blocks dropped, values replaced by a placeholder: the rest is the Job
    text = re.sub(r"{{-[^}]*}}", "", _template("migrate-job.yaml"))
    job = yaml.safe_load(re.sub(r"{{[^}]*}}", "x", text))
    assert job["kind"] == "Job"
    annotations = job["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["python", "manage.py", "migrate", "--noinput"]
    assert job["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_stopped_pods_are_given_the_time_their_work_may_take() -> None:
    values = _values()
    web, workers = _template("web.yaml"), _template("workers.yaml").split("\n---\n")[0]
    # web: out of the Service (preStop), then gunicorn's graceful timeout for requests
    assert (
        "terminationGracePeriodSeconds: {{ add .Values.web.preStopSeconds "
        ".Values.web.gunicorn.gracefulTimeout 5 }}"
    ) in web
    assert '"--graceful-timeout", "{{ .Values.web.gunicorn.gracefulTimeout }}"' in web
    assert values["web"]["gunicorn"]["gracefulTimeout"] < values["web"]["gunicorn"]["timeout"]
    # workers: a warm shutdown lasts at most the hard task time limit
    assert "terminationGracePeriodSeconds: {{ add .Values.tasks.timeLimit 30 }}" in workers
    assert values["tasks"]["softTimeLimit"] < values["tasks"]["timeLimit"]
    helpers = _template("_helpers.tpl")
    assert "CELERY_TASK_TIME_LIMIT\n    value: {{ .Values.tasks.timeLimit | quote }}" in helpers
    assert "CELERY_TASK_SOFT_TIME_LIMIT\n    value: {{ .Values.tasks.softTimeLimit" in helpers
    # the chart's limits are the settings' defaults: a run without the chart agrees
    from django.conf import settings

    assert values["tasks"]["timeLimit"] == settings.CELERY_TASK_TIME_LIMIT
    assert values["tasks"]["softTimeLimit"] == settings.CELERY_TASK_SOFT_TIME_LIMIT


def test_compose_migrates_once_before_web_and_workers_and_probes_readiness() -> None:
    compose = yaml.safe_load((CHART.parents[2] / "docker-compose.yml").read_text())
    services = compose["services"]
    assert services["migrate"]["command"] == ["python", "manage.py", "migrate", "--noinput"]
    for name in ("web", "worker", "beat", "watch"):
        assert "migrate" not in str(services[name]["command"]), name
        after = services[name]["depends_on"]["migrate"]
        assert after == {"condition": "service_completed_successfully"}, name
    probe = " ".join(services["web"]["healthcheck"]["test"])
    assert "/readyz" in probe and "/accounts/login/" not in probe


def test_the_chart_serves_metrics_from_every_process_of_a_pod() -> None:
    """Web and worker pods count into a shared emptyDir (PROMETHEUS_MULTIPROC_DIR), every
    container that gets the variable mounts it, and workers expose their metrics port."""
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["metrics"]["enabled"] is True
    helpers = _template("_helpers.tpl")
    assert "PROMETHEUS_MULTIPROC_DIR" in helpers and "mountPath: /metrics-data" in helpers
    web = _template("web.yaml")
    workers, beat = _template("workers.yaml").split("\n---\n")
    for name, pod in (
        ("web", web),
        ("worker", workers),
        ("beat", beat),
        ("watch", _template("watch.yaml")),
        ("migrate", _template("migrate-job.yaml")),
    ):
        # each pod that mounts the directory (through containerSecurity) declares it
        assert 'include "tidegate.metricsVolume"' in pod, name
    # the webhook container mounts its volumes itself
    webhook = web.split("- name: webhook\n", 1)[1]
    assert "{name: metrics-data, mountPath: /metrics-data}" in webhook
    assert (
        "TIDEGATE_METRICS_PORT" in workers
        and "containerPort: {{ .Values.metrics.workerPort }}" in workers
    )
    assert 'prometheus.io/port: "8000"' in web


def test_the_chart_counts_rate_limits_per_client_behind_its_ingress() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())
    assert values["env"]["TIDEGATE_NUM_PROXIES"] == "1"
