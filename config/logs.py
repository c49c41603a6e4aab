"""Structured logs: every line says which request or task wrote it.

A request's id comes from its ``X-Request-ID`` header (a proxy's or a client's) or is
made up, and is echoed in the response's ``X-Request-ID``; a Celery task's id is its
own. Both live in context variables that ``ContextFilter`` copies onto every record, so
the JSON formatter (settings.LOGGING) writes them on every line, whichever logger wrote
it. A task queued during a request carries the request's id in its headers, so the
worker's lines can be joined to the request that asked for the work.
"""

from __future__ import annotations

import logging
import logging.config
import re
import uuid
from collections.abc import Callable
from contextvars import ContextVar, Token
from typing import Any

from celery import signals as celery_signals
from django.conf import settings
from django.core import signals as django_signals
from django.http import HttpRequest, HttpResponse

REQUEST_ID_HEADER = "X-Request-ID"
# what a request id may look like when a client or proxy sends one; anything else (too
# long, or with characters that could forge a log line) is replaced by a fresh one
_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")

current_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)
current_task_id: ContextVar[str | None] = ContextVar("task_id", default=None)
current_task_name: ContextVar[str | None] = ContextVar("task_name", default=None)
# what a task's start set, to put back when it ends (an eager task runs inside a request)
_restore: dict[str, list[Token[str | None]]] = {}


class ContextFilter(logging.Filter):
    """Puts ``request_id``, ``task_id`` and ``task_name`` on every record (None outside
    a request or a task). Attached to the handlers, so records of every logger get them."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = current_request_id.get()
        record.task_id = current_task_id.get()
        record.task_name = current_task_name.get()
        return True


def request_id_of(request: HttpRequest) -> str:
    given = request.headers.get(REQUEST_ID_HEADER, "")
    return given if _SAFE_ID.match(given) else uuid.uuid4().hex


class RequestIdMiddleware:
    """Sets the request id for the lines the request logs and echoes it in the response.

    The id stays set until the request is finished (``request_finished``), so Django's
    own lines about the response ("Not Found: ...", logged after the middleware
    returned) carry it too."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        current = request_id_of(request)
        current_request_id.set(current)
        request.request_id = current  # type: ignore[attr-defined]
        response = self.get_response(request)
        response[REQUEST_ID_HEADER] = current
        return response


def _request_finished(**_: Any) -> None:
    current_request_id.set(None)


django_signals.request_finished.connect(_request_finished, dispatch_uid="tidegate-request-id")


@celery_signals.before_task_publish.connect
def _publish_with_request_id(headers: dict[str, Any] | None = None, **_: Any) -> None:
    current = current_request_id.get()
    if headers is not None and current and "request_id" not in headers:
        headers["request_id"] = current


@celery_signals.task_prerun.connect
def _task_started(task_id: str | None = None, task: Any = None, **_: Any) -> None:
    tokens = [current_task_id.set(task_id), current_task_name.set(getattr(task, "name", None))]
    parent = getattr(getattr(task, "request", None), "request_id", None)
    if isinstance(parent, str) and _SAFE_ID.match(parent):
        tokens.append(current_request_id.set(parent))
    if task_id is not None:
        _restore[task_id] = tokens


@celery_signals.task_postrun.connect
def _task_ended(task_id: str | None = None, **_: Any) -> None:
    for token in reversed(_restore.pop(task_id or "", [])):
        token.var.reset(token)


@celery_signals.setup_logging.connect
def _worker_logging(loglevel: int | str | None = None, **_: Any) -> None:
    """Celery workers log through settings.LOGGING (JSON lines with task ids) instead of
    Celery's own format; ``--loglevel`` still sets the level."""
    logging.config.dictConfig(settings.LOGGING)
    if loglevel:
        logging.getLogger().setLevel(loglevel)
