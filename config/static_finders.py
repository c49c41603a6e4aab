"""Serves plotly's JavaScript from the installed `plotly` package, so the portal's charts
work offline and the bundle always matches the Python library that draws them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import plotly
from django.contrib.staticfiles.finders import BaseFinder
from django.core.files.storage import FileSystemStorage

PLOTLY_DIR = Path(plotly.__file__).resolve().parent / "package_data"
PLOTLY_STATIC_PATH = "tidegate/vendor/plotly.min.js"


class PlotlyFinder(BaseFinder):
    storage = FileSystemStorage(location=str(PLOTLY_DIR))

    def check(self, **kwargs: Any) -> list[Any]:
        return []

    def find(self, path: str, find_all: bool = False, **kwargs: Any) -> Any:
        if path != PLOTLY_STATIC_PATH:
            return [] if find_all else None
        found = str(PLOTLY_DIR / "plotly.min.js")
        return [found] if find_all else found

    def list(self, ignore_patterns: Any) -> Iterator[tuple[str, Any]]:
        storage = FileSystemStorage(location=str(PLOTLY_DIR))
        storage.prefix = "tidegate/vendor"  # type: ignore[attr-defined]
        yield "plotly.min.js", storage
