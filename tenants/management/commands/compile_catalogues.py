"""Build the compiled message catalogues (``.mo``) from the translations (``.po``).

Pure Python (polib), so neither the demo nor a bare machine needs GNU gettext. Only
catalogues whose ``.po`` is newer than their ``.mo`` are written; the ``.mo`` files are
build output, never committed (so never stale in the repository).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import polib
from django.conf import settings
from django.core.management.base import BaseCommand, CommandError


def catalogues() -> list[Path]:
    """Every ``.po`` file under the project's locale paths."""
    return sorted(
        p for root in settings.LOCALE_PATHS for p in Path(root).glob("*/LC_MESSAGES/*.po")
    )


def compile_catalogue(po_path: Path, *, force: bool = False) -> bool:
    """Write ``po_path``'s ``.mo`` beside it when missing or older; True if written.
    CommandError naming the file and line for a catalogue that does not parse."""
    mo_path = po_path.with_suffix(".mo")
    if not force and mo_path.exists() and mo_path.stat().st_mtime >= po_path.stat().st_mtime:
        return False
    try:
        catalogue = polib.pofile(str(po_path))
    except (OSError, ValueError) as error:
        raise CommandError(f"{po_path}: {error}") from error
    catalogue.save_as_mofile(str(mo_path))
    return True


class Command(BaseCommand):
    help = "Compile the translation catalogues (locale/*/LC_MESSAGES/*.po) into .mo files."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--force", action="store_true", help="rewrite every .mo")

    def handle(self, *args: Any, **options: Any) -> None:
        written = [p for p in catalogues() if compile_catalogue(p, force=options["force"])]
        for path in written:
            self.stdout.write(f"compiled {path.with_suffix('.mo')}")
        if not written:
            self.stdout.write("catalogues up to date")
