"""schemathesis, run as its command line runs, keeps /api/schema/ honest: every check
(``--checks all``) over every operation, as a platform admin and as a team lead on the
demo data, with a fixed seed. No 5xx, every status and content type documented, every
answer as its schema says, what the schema allows accepted and what it refuses refused,
and authentication enforced everywhere.

Per-user rate limits are off and the anonymous rate raised here, so that neither hides
an answer (tests/tenants/test_throttling.py checks them); every request carries a fresh
Idempotency-Key (hooks.py) for the same reason."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.test import override_settings

from tenants.demo import seed_demo
from tenants.tokens import token_create

ROOT = Path(__file__).resolve().parents[3]
# generated requests per operation in the fuzzing phase; the coverage phase adds its own
# boundary cases. Keeps both users' runs within a few minutes in CI.
EXAMPLES = int(os.environ.get("TIDEGATE_CONTRACT_EXAMPLES", "3"))
SEED = 20261206
# requests in flight at once: an answer waits mostly on the network, not the processor
WORKERS = 4
UNTHROTTLED = {"user": None, "anon": "100000/min", "login": None, "token_create": None}


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("username", ["admin", "vision-lead"])
def test_schemathesis_finds_nothing_as(username: str, live_server: Any, tmp_path: Path) -> None:
    seed_demo()
    _, secret = token_create(user=get_user_model().objects.get(username=username), name="contract")
    # as the demo runs them: a what-if run on a thread beside the request that queued it
    with override_settings(
        TIDEGATE_THROTTLE_RATES=UNTHROTTLED,
        TIDEGATE_EAGER_IN_BACKGROUND=frozenset({"billing.tasks.whatif_run"}),
    ):
        run = subprocess.run(
            [
                sys.executable,
                "-m",
                "schemathesis.cli",
                "--config-file",
                str(ROOT / "schemathesis.toml"),
                "run",
                # by address: "localhost" may be tried over IPv6 first, on every request
                f"{live_server.url.replace('localhost', '127.0.0.1')}/api/schema/",
                "--checks",
                "all",
                "--phases",
                "examples,coverage,fuzzing",
                "--max-examples",
                str(EXAMPLES),
                "--seed",
                str(SEED),
                "--workers",
                str(WORKERS),
                "--request-timeout",
                "120",
                "--header",
                f"Authorization: Token {secret}",
                "--report",
                "ndjson",
                "--report-dir",
                str(tmp_path),
            ],
            cwd=ROOT,
            env={**os.environ, "SCHEMATHESIS_HOOKS": "tests.security.contract.hooks"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        for thread in threading.enumerate():  # the runs finish before the database goes
            if thread.name.startswith("tidegate-"):
                thread.join(timeout=600)
    assert run.returncode == 0, _failures(run.stdout) + run.stderr[-2000:]


def _failures(output: str) -> str:
    """The run's failure section, without the progress lines before it."""
    start = output.find("=== FAILURES ===")
    if start < 0:
        start = output.find("=== ERRORS ===")
    return output[start:] if start >= 0 else output[-6000:]
