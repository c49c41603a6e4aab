"""Tidegate's Helm chart as `helm install` would apply it, rendered by the pinned helm of
``toolchain/helm`` (so the real-cluster tests apply the chart's own RBAC and webhooks)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from toolchain.build import binaries_folder, build_all, modules

CHART = Path(__file__).resolve().parents[2] / "platform" / "helm" / "tidegate"
RELEASE, NAMESPACE = "tidegate-test", "tidegate-system"


def rendered_chart(*values: str) -> list[dict[str, Any]]:
    """`helm template` of the chart (``values``: `--set` arguments), as documents."""
    build_all(["helm"], quiet=True)
    (helm_module,) = [m for m in modules() if m.name == "helm"]
    helm = binaries_folder(helm_module) / "helm"
    command = [str(helm), "template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in values:
        command += ["--set", value]
    output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return [d for d in yaml.safe_load_all(output) if d]
