"""Project-wide rules: layout, deploy checks, the OpenAPI schema, the demo seeder."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_no_top_level_package_shadows_the_standard_library() -> None:
    packages = {p.name for p in ROOT.iterdir() if (p / "__init__.py").is_file()}
    assert packages >= {"config", "tenants", "scheduler_bridge", "billing"}
    assert not packages & set(sys.stdlib_module_names)


def _clean_environ() -> dict[str, str]:
    """This process's environment without what other tests may have set for themselves."""
    return {k: v for k, v in os.environ.items() if k != "DJANGO_ALLOW_ASYNC_UNSAFE"}


def _manage(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=_clean_environ() | env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_production_settings_pass_the_deploy_check() -> None:
    result = _manage(
        "check",
        "--deploy",
        "--fail-level",
        "WARNING",
        env={
            "DJANGO_SETTINGS_MODULE": "config.settings.production",
            "SECRET_KEY": "x" * 64 + "-production-secret-with-enough-entropy-0123456789",
            "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/tidegate",
            "DJANGO_ALLOWED_HOSTS": "tidegate.example.com",
            "CELERY_BROKER_URL": "redis://127.0.0.1:6379/0",
        },
    )
    assert result.returncode == 0, result.stderr + result.stdout
    assert "no issues" in result.stdout


def test_production_settings_refuse_to_start_without_a_secret_key() -> None:
    env = {"DJANGO_SETTINGS_MODULE": "config.settings.production", "SECRET_KEY": ""}
    env_without = {k: v for k, v in (_clean_environ() | env).items() if k != "SECRET_KEY"}
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=ROOT,
        env=env_without,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


@pytest.mark.parametrize("name", ["TIDEGATE_RECLAIM_WAIT_S", "TIDEGATE_RECLAIM_MIN_RUN_S"])
def test_a_negative_reclaim_setting_stops_the_start_with_what_to_set(name: str) -> None:
    result = _manage("check", env={"DJANGO_SETTINGS_MODULE": "config.settings.test", name: "-5"})
    assert result.returncode != 0
    assert f"{name} is -5; give 0 (at once) or more seconds." in result.stderr


def test_openapi_schema_validates_without_warnings() -> None:
    result = _manage(
        "spectacular",
        "--validate",
        "--fail-on-warn",
        "--file",
        os.devnull,
        env={"DJANGO_SETTINGS_MODULE": "config.settings.test"},
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.django_db
def test_seed_demo_is_idempotent_and_covers_every_role() -> None:
    from tenants.demo import seed_demo
    from tenants.models import AuditEvent, Membership, Role, Tenant

    first = seed_demo()
    counts = (Tenant.objects.count(), Membership.objects.count(), AuditEvent.objects.count())
    second = seed_demo()
    assert counts == (
        Tenant.objects.count(),
        Membership.objects.count(),
        AuditEvent.objects.count(),
    )
    assert second.created == 0 and first.created > 0
    assert Tenant.objects.filter(depth=1).count() >= 3
    assert Tenant.objects.filter(depth=2).count() >= 8
    assert set(Membership.objects.values_list("role", flat=True)) == set(Role.values)
    assert {login.username for login in first.logins} >= {"admin", "finance", "vision-lead"}


def test_the_demo_seeds_from_scratch_and_again_on_sqlite(tmp_path: Path) -> None:
    """What `make demo` runs, in a fresh process: migrate, then seed twice."""
    env = {
        "DJANGO_SETTINGS_MODULE": "config.settings.demo",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.sqlite3'}",
    }
    for args in (("migrate", "--noinput", "-v0"), ("seed_demo",), ("seed_demo",)):
        result = _manage(*args, env=env)
        assert result.returncode == 0, result.stderr[-3000:]
        assert "Traceback" not in result.stderr
    assert "vision-lead" in result.stdout and "tidegate-demo" in result.stdout
