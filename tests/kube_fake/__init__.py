"""A fake Kubernetes API server for tests: the real ``kubernetes`` client talks to it
over HTTP. See :class:`FakeKubeApi` for the test hooks and ``fixtures.py`` for pytest."""

from .server import DEFAULT_TOKEN, WRITE_VERBS, FakeKubeApi, RequestRecord

__all__ = ["DEFAULT_TOKEN", "WRITE_VERBS", "FakeKubeApi", "RequestRecord"]
