"""Deciding what an idempotent apply must do, and what drift it repairs.

Both gateways share this so they report the same thing for the same cluster state.
An applied object carries a ``tidegate.io/last-applied`` annotation recording the labels
and a digest of each content key Tidegate wrote. Comparing the live object with that
record separates somebody else's hand edit (drift) from Tidegate's own change of mind
(a new desired state), which a plain live-versus-desired comparison cannot.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from i18n.wording import Wording, gettext_noop, wording

from .base import LAST_APPLIED_ANNOTATION


@dataclass(frozen=True)
class ApplyPlan:
    """``body`` is the full object to apply (desired plus the last-applied record);
    ``stale_keys`` are content keys the live object has but must lose."""

    write: bool
    create: bool
    body: dict[str, Any]
    drift: tuple[str, ...]
    stale_keys: tuple[str, ...]


def _digest(value: Any) -> str:
    canonical = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def get_path(obj: Mapping[str, Any] | None, path: tuple[str, ...]) -> dict[str, Any]:
    """The map at ``path`` (a copy), or {} when any step is missing."""
    node: Any = obj or {}
    for key in path:
        node = node.get(key) if isinstance(node, Mapping) else None
    return dict(node) if isinstance(node, Mapping) else {}


def _record(labels: Mapping[str, str], content: Mapping[str, Any]) -> str:
    record = {"labels": dict(labels), "content": {k: _digest(v) for k, v in content.items()}}
    return json.dumps(record, sort_keys=True, separators=(",", ":"))


def _read_record(live: Mapping[str, Any]) -> dict[str, dict[str, str]] | None:
    raw = get_path(live, ("metadata", "annotations")).get(LAST_APPLIED_ANNOTATION)
    try:
        record = json.loads(raw) if raw else None
    except ValueError:
        return None
    if not isinstance(record, dict):
        return None
    return {"labels": record.get("labels") or {}, "content": record.get("content") or {}}


def plan_apply(
    live: Mapping[str, Any] | None,
    desired: Mapping[str, Any],
    content_path: tuple[str, ...],
    *,
    expect_existing: bool = False,
    show_values: bool = True,
) -> ApplyPlan:
    """Compare ``live`` (None when absent) with ``desired``, whose map at
    ``content_path`` (``spec.hard``, ``data``) must match exactly and whose labels must
    be present. ``show_values`` puts values in drift messages (off for large data)."""
    meta = desired["metadata"]
    where = f"{desired['kind']} {meta.get('namespace', '')}/{meta['name']}".replace(" /", " ")
    want_labels = dict(meta.get("labels") or {})
    want_content = get_path(desired, content_path)
    record = _record(want_labels, want_content)
    body = copy.deepcopy(dict(desired))
    body["metadata"].setdefault("annotations", {})[LAST_APPLIED_ANNOTATION] = record

    if live is None:
        gone = (
            (
                wording(
                    gettext_noop("%(object)s was deleted outside Tidegate; recreated"), object=where
                ),
            )
            if expect_existing
            else ()
        )
        return ApplyPlan(True, True, body, gone, ())

    have_labels = get_path(live, ("metadata", "labels"))
    have_content = get_path(live, content_path)
    have_record = get_path(live, ("metadata", "annotations")).get(LAST_APPLIED_ANNOTATION)
    stale = tuple(sorted(k for k in have_content if k not in want_content))
    in_sync = (
        have_content == want_content
        and all(have_labels.get(k) == v for k, v in want_labels.items())
        and have_record == record
    )
    if in_sync:
        return ApplyPlan(False, False, body, (), ())
    drift = _describe_drift(
        where, live, have_labels, have_content, want_labels, want_content, content_path, show_values
    )
    return ApplyPlan(True, False, body, drift, stale)


def _describe_drift(
    where: str,
    live: Mapping[str, Any],
    have_labels: Mapping[str, str],
    have_content: Mapping[str, Any],
    want_labels: Mapping[str, str],
    want_content: Mapping[str, Any],
    content_path: tuple[str, ...],
    show_values: bool,
) -> tuple[str, ...]:
    record = _read_record(live)
    field = ".".join(content_path)
    findings: list[str] = []
    if record is None:
        # Never applied by Tidegate (or the record was destroyed): every difference
        # from what Tidegate wants was made by somebody else.
        last_labels: Mapping[str, str] = want_labels
        last_content = {k: _digest(v) for k, v in want_content.items()}
    else:
        last_labels, last_content = record["labels"], record["content"]

    for key in sorted(set(have_content) | set(last_content)):
        have, want = have_content.get(key), want_content.get(key)
        if have == want:
            continue
        was_ours = key in last_content and have is not None and _digest(have) == last_content[key]
        if was_ours:
            continue  # unchanged since Tidegate wrote it: this is Tidegate's own update
        label = f"{where}: {field}[{key}]"
        findings.append(_content_drift(label, have, want, key in last_content, show_values))

    for key in sorted(set(want_labels) | set(last_labels)):
        have, want = have_labels.get(key), want_labels.get(key)
        if want is None or have == want or have == last_labels.get(key):
            continue
        if have is None:
            findings.append(
                wording(
                    gettext_noop(
                        "%(object)s: label %(key)s was removed outside Tidegate; restored"
                    ),
                    object=where,
                    key=key,
                )
            )
        else:
            findings.append(
                wording(
                    gettext_noop(
                        "%(object)s: label %(key)s was changed to %(value)s outside Tidegate; "
                        "restored"
                    ),
                    object=where,
                    key=key,
                    value=repr(have),
                )
            )
    return tuple(findings)


def _content_drift(label: str, have: Any, want: Any, was_ours: bool, show_values: bool) -> Wording:
    """What somebody did to one key of the content outside Tidegate, and what Tidegate did
    about it, worded for the audit trail (said again in the reader's language)."""
    if have is None:
        return wording(
            gettext_noop("%(field)s was removed outside Tidegate; restored"), field=label
        )
    if show_values:
        if not was_ours:
            template = (
                gettext_noop("%(field)s was added outside Tidegate to %(value)s; removed")
                if want is None
                else gettext_noop("%(field)s was added outside Tidegate to %(value)s; overwritten")
            )
        else:
            template = (
                gettext_noop("%(field)s was changed outside Tidegate to %(value)s; removed")
                if want is None
                else gettext_noop("%(field)s was changed outside Tidegate to %(value)s; restored")
            )
        return wording(template, field=label, value=repr(have))
    if not was_ours:
        template = (
            gettext_noop("%(field)s was added outside Tidegate; removed")
            if want is None
            else gettext_noop("%(field)s was added outside Tidegate; overwritten")
        )
    else:
        template = (
            gettext_noop("%(field)s was changed outside Tidegate; removed")
            if want is None
            else gettext_noop("%(field)s was changed outside Tidegate; restored")
        )
    return wording(template, field=label)
