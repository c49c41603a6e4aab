"""The Chinese catalogue is complete and current: every string the code and templates
mark for translation is in locale/zh_Hans (makemessages run afresh finds nothing new and
nothing gone), every entry is translated with the same placeholders, it compiles, and
the portal speaks it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import polib
from django.core.management import call_command
from django.test import override_settings
from django.utils import translation

from tenants.management.commands.compile_catalogues import compile_catalogue

ROOT = Path(__file__).resolve().parents[1]
CATALOGUE = ROOT / "locale" / "zh_Hans" / "LC_MESSAGES" / "django.po"
# what makemessages reads: the product, not its tests or benchmarks (Makefile: messages)
IGNORED = [".venv/*", "tests/*", "benchmarks/*", "staticfiles/*", "docs/*", "platform/*"]
PLACEHOLDER = re.compile(r"%\((\w+)\)[sd]|%[sd]|\{\w*\}")


def entries() -> list[polib.POEntry]:
    return [e for e in polib.pofile(str(CATALOGUE)) if not e.obsolete]


def test_every_entry_is_translated_keeping_its_placeholders() -> None:
    found = entries()
    assert len(found) > 250
    untranslated = [e.msgid for e in found if not (e.msgstr or e.msgstr_plural.get(0))]
    assert untranslated == []
    assert [e.msgid for e in found if "fuzzy" in e.flags] == []
    for entry in found:
        text = entry.msgstr or entry.msgstr_plural[0]
        wanted = sorted(PLACEHOLDER.findall(entry.msgid))
        if entry.msgid_plural:
            wanted = sorted(set(wanted) | set(PLACEHOLDER.findall(entry.msgid_plural)))
            assert sorted(set(PLACEHOLDER.findall(text))) <= wanted, entry.msgid
        else:
            assert sorted(PLACEHOLDER.findall(text)) == wanted, entry.msgid


def test_the_catalogue_holds_exactly_what_the_sources_mark(tmp_path: Path, monkeypatch) -> None:
    assert shutil.which("xgettext"), "GNU gettext is missing (.ci/ensure_services.sh installs it)"
    # makemessages writes into any locale folder it finds: run it on a copy of the
    # sources, merging into a copy of the catalogue (as `make messages` does)
    sources = tmp_path / "src"
    apps = [path.parent.name for path in ROOT.glob("*/apps.py")]
    for folder in [*apps, "config", "templates"]:
        shutil.copytree(
            ROOT / folder, sources / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    target = sources / "locale" / "zh_Hans" / "LC_MESSAGES"
    target.mkdir(parents=True)
    shutil.copy(CATALOGUE, target / "django.po")
    monkeypatch.chdir(sources)
    with override_settings(LOCALE_PATHS=[str(sources / "locale")]):
        call_command(
            "makemessages",
            locale=["zh_Hans"],
            ignore_patterns=IGNORED,
            no_obsolete=True,
            no_location=True,
            verbosity=0,
        )
    fresh = polib.pofile(str(target / "django.po"))
    marked = {(e.msgctxt, e.msgid) for e in fresh}
    held = {(e.msgctxt, e.msgid) for e in entries()}
    assert sorted(marked - held, key=str) == [], (
        "marked but not in the catalogue: run make messages"
    )
    assert sorted(held - marked, key=str) == [], "in the catalogue but no longer marked"


def test_the_catalogue_compiles_and_the_portal_speaks_chinese(client, cast, tmp_path) -> None:
    compiled = tmp_path / "django.po"
    shutil.copy(CATALOGUE, compiled)
    assert compile_catalogue(compiled, force=True)
    assert compiled.with_suffix(".mo").stat().st_size > 1000
    with translation.override("zh-hans"):
        heading = translation.gettext("GPU quotas")
        tenants = translation.gettext("My tenants")
    assert heading != "GPU quotas" and tenants != "My tenants"
    client.force_login(cast.lead)
    page = client.get("/tenants/vision/", HTTP_ACCEPT_LANGUAGE="zh-hans").content.decode()
    assert '<html lang="zh-hans">' in page
    assert heading in page and tenants in page
