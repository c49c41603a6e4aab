"""Talking to a local control plane as its administrator, and waiting for it.

One client serves the control plane's own start-up, the framework installers, the test
helpers (tests/kube_real) and the scale benchmark: HTTPS with the control plane's CA and
the administrator's bearer token, one ``requests`` session per thread (the benchmark
writes from many).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import requests

T = TypeVar("T")
# answers that mean "ask again": throttled, or a component still starting
RETRIED_STATUSES = frozenset({429, 500, 503, 504})


class WaitTimedOut(RuntimeError):
    """A condition did not hold in time; the message says which."""


def wait_until(
    check: Callable[[], T],
    what: str,
    timeout_s: float,
    *,
    interval_s: float = 0.1,
    tolerated: tuple[type[BaseException], ...] = (),
) -> T:
    """Call ``check`` until it returns something true and return that; exceptions of the
    ``tolerated`` types count as "not yet". WaitTimedOut names ``what`` after
    ``timeout_s`` seconds."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            found = check()
            if found:
                return found
        except tolerated:
            pass
        if time.monotonic() >= deadline:
            raise WaitTimedOut(f"timed out after {timeout_s:.0f} s waiting for {what}")
        time.sleep(interval_s)


class AdminClient:
    """Requests to one API server as its administrator."""

    def __init__(self, url: str, ca_file: Path, token: str) -> None:
        self.url, self._ca_file, self._token = url, str(ca_file), token
        self._local = threading.local()

    @property
    def session(self) -> requests.Session:
        """This thread's session."""
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            session.trust_env = False  # REQUESTS_CA_BUNDLE would replace the CA below
            session.verify = self._ca_file
            session.headers["Authorization"] = f"Bearer {self._token}"
            self._local.session = session
        return session

    def request(
        self, method: str, path: str, *, timeout_s: float = 30, **kwargs: Any
    ) -> requests.Response:
        return self.session.request(method, f"{self.url}{path}", timeout=timeout_s, **kwargs)

    def call(
        self, method: str, path: str, body: Any = None, *, timeout_s: float = 30
    ) -> tuple[int, dict[str, Any]]:
        """One request with a JSON body (or none): (status, JSON answer); an answer that
        is not JSON comes back as ``{"text": ...}``."""
        answer = self.request(method, path, json=body, timeout_s=timeout_s)
        try:
            found = answer.json()
        except ValueError:
            found = {"text": answer.text}
        return answer.status_code, found if isinstance(found, dict) else {"items": found}

    def close(self) -> None:
        session = getattr(self._local, "session", None)
        if session is not None:
            session.close()
            self._local.session = None
