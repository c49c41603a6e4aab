"""Walk the portal as a signed-in user would: every page reachable by links from the home
page, a few samples of each kind of page (one workload page stands for all of them)."""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Callable
from html import unescape
from urllib.parse import parse_qsl, urljoin, urlsplit

# not portal pages: the API and its docs, the Django admin, files, log-in and language forms,
# downloads (tested with their pages), and webhooks the API server calls
NOT_PAGES = ("/api/", "/admin/", "/static/", "/accounts/", "/i18n/", "/webhooks/")
DOWNLOAD = re.compile(r"/export/|/pdf/|\.(csv|xlsx|pdf)$|[?&](format|as)=")
HREF = re.compile(r"""<a\b[^>]*\bhref="([^"#][^"]*)\"""")
SAMPLES_PER_KIND = 2


def kind_of(url: str) -> str:
    """Pages of one kind share a shape: numbers and the values of query keys set aside
    (``/workloads/17/`` and ``/workloads/18/`` are one kind; ``?page=2`` and ``?page=3`` too)."""
    parts = urlsplit(url)
    keys = ",".join(sorted({key for key, _ in parse_qsl(parts.query)}))
    return re.sub(r"\d+", "N", parts.path) + ("?" + keys if keys else "")


def links(page: str, here: str) -> list[str]:
    found = []
    for href in HREF.findall(page):
        url = urljoin(here, unescape(href))
        parts = urlsplit(url)
        if parts.netloc and parts.netloc != "testserver" and not parts.netloc.startswith("127."):
            continue
        path = parts.path + ("?" + parts.query if parts.query else "")
        if path.startswith(NOT_PAGES) or DOWNLOAD.search(path):
            continue
        found.append(path)
    return found


def crawl(fetch: Callable[[str], tuple[int, str]], start: str = "/", limit: int = 80) -> list[str]:
    """The pages reachable from ``start`` by ``fetch`` (url -> status, html), in the order
    found, at most ``SAMPLES_PER_KIND`` of a kind and ``limit`` in all; only pages that
    answered 200 are returned and followed."""
    seen: set[str] = {start}
    per_kind: dict[str, int] = {}
    queue = deque([start])
    pages: list[str] = []
    while queue and len(pages) < limit:
        url = queue.popleft()
        status, page = fetch(url)
        if status != 200:
            continue
        pages.append(url)
        for found in links(page, url):
            kind = kind_of(found)
            if found in seen or per_kind.get(kind, 0) >= SAMPLES_PER_KIND:
                continue
            seen.add(found)
            per_kind[kind] = per_kind.get(kind, 0) + 1
            queue.append(found)
    return pages
