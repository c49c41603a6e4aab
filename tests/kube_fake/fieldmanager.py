"""Field ownership for the fake API server: managedFields, server-side apply, merge patch.

A reduced model of the real field manager: ownership is tracked per leaf path (maps
are granular, lists are atomic), updates move ownership of the fields they change to
their manager, an apply conflicts with other owners of fields it sets to a different
value unless forced, and an apply removes fields its manager applied last time but no
longer mentions (unless somebody else owns them too).
"""

from __future__ import annotations

from typing import Any

from .jsoncopy import clone

Path = tuple[str, ...]
EntryKey = tuple[str, str, str]  # manager, operation, subresource
_TRACKED_METADATA = ("labels", "annotations", "ownerReferences", "finalizers")
_MISSING = object()


def leaves(obj: dict[str, Any]) -> dict[Path, Any]:
    """Every owned leaf path of ``obj`` with its value (status and identity excluded)."""
    found: dict[Path, Any] = {}

    def walk(node: Any, prefix: Path) -> None:
        if isinstance(node, dict) and node:
            for key, value in node.items():
                walk(value, (*prefix, key))
        else:
            found[prefix] = node

    for key, value in obj.items():
        if key in ("apiVersion", "kind", "status"):
            continue
        if key == "metadata":
            for meta_key in _TRACKED_METADATA:
                if meta_key in value:
                    walk(value[meta_key], ("metadata", meta_key))
            continue
        walk(value, (key,))
    return found


def status_leaves(obj: dict[str, Any]) -> dict[Path, Any]:
    status = obj.get("status")
    return {("status", *p[1:]): v for p, v in leaves({"x": status}).items()} if status else {}


def _fields_v1(paths: set[Path]) -> dict[str, Any]:
    tree: dict[str, Any] = {}
    for path in sorted(paths):
        node = tree
        for key in path:
            node = node.setdefault(f"f:{key}", {})
    return tree


def _paths(tree: dict[str, Any], prefix: Path = ()) -> set[Path]:
    children = {k: v for k, v in tree.items() if k.startswith("f:")}
    if not children:
        return {prefix} if prefix else set()
    found: set[Path] = set()
    for key, child in children.items():
        found |= _paths(child, (*prefix, key[2:]))
    return found


def read_entries(obj: dict[str, Any]) -> dict[EntryKey, set[Path]]:
    entries: dict[EntryKey, set[Path]] = {}
    for entry in obj.get("metadata", {}).get("managedFields") or []:
        key = (entry["manager"], entry["operation"], entry.get("subresource", ""))
        entries[key] = _paths(entry.get("fieldsV1") or {})
    return entries


def write_entries(
    obj: dict[str, Any],
    entries: dict[EntryKey, set[Path]],
    previous: list[dict[str, Any]],
    touched: set[EntryKey],
    now: str,
) -> None:
    """Render ``entries`` into metadata.managedFields, keeping the old timestamps of
    entries this request did not touch."""
    times = {
        (e["manager"], e["operation"], e.get("subresource", "")): e.get("time") for e in previous
    }
    rendered = []
    for key, paths in entries.items():
        if not paths:
            continue
        manager, operation, subresource = key
        entry = {
            "manager": manager,
            "operation": operation,
            "apiVersion": obj["apiVersion"],
            "time": now if key in touched or key not in times else times[key],
            "fieldsType": "FieldsV1",
            "fieldsV1": _fields_v1(paths),
        }
        if subresource:
            entry["subresource"] = subresource
        rendered.append(entry)
    if rendered:
        obj["metadata"]["managedFields"] = rendered
    else:
        obj["metadata"].pop("managedFields", None)


def _related(a: Path, b: Path) -> bool:
    shorter = min(len(a), len(b))
    return a[:shorter] == b[:shorter]


def _value_at(obj: Any, path: Path) -> Any:
    node = obj
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return _MISSING
        node = node[key]
    return node


def _delete_path(obj: dict[str, Any], path: Path) -> None:
    parents = [obj]
    for key in path[:-1]:
        node = parents[-1].get(key)
        if not isinstance(node, dict):
            return
        parents.append(node)
    parents[-1].pop(path[-1], None)
    # Drop maps the removal emptied, but never a top-level section.
    for depth in range(len(parents) - 1, 1, -1):
        if not parents[depth]:
            parents[depth - 1].pop(path[depth - 1], None)


def deep_merge(base: dict[str, Any], overlay: dict[str, Any]) -> dict[str, Any]:
    for key, value in overlay.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            deep_merge(base[key], value)
        else:
            base[key] = clone(value)
    return base


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (strategic merge patches: strategic.py)."""
    if not isinstance(patch, dict):
        return clone(patch)
    result = clone(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$"):
            continue  # a strategic-merge directive means nothing in a JSON merge patch
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def record_update(
    old: dict[str, Any] | None, new: dict[str, Any], manager: str, subresource: str, now: str
) -> None:
    """Ownership after a create/update/patch: the fields it changed become ``manager``'s."""
    entries = read_entries(old) if old else {}
    previous = list((old or {}).get("metadata", {}).get("managedFields") or [])
    pick = status_leaves if subresource == "status" else leaves
    old_leaves = pick(old) if old else {}
    new_leaves = pick(new)
    changed = {p for p, v in new_leaves.items() if old_leaves.get(p, _MISSING) != v}
    all_new = set(leaves(new)) | set(status_leaves(new))
    key = (manager, "Update", subresource)
    for entry_key in entries:
        entries[entry_key] = {
            p for p in entries[entry_key] if p in all_new and (entry_key == key or p not in changed)
        }
    entries[key] = entries.get(key, set()) | changed
    touched = {key} if changed else set()
    write_entries(new, entries, previous, touched, now)


class ApplyConflict(Exception):
    def __init__(self, conflicts: list[tuple[str, Path]]) -> None:
        super().__init__(conflicts)
        self.conflicts = conflicts


def server_side_apply(
    live: dict[str, Any] | None,
    config: dict[str, Any],
    manager: str,
    force: bool,
    now: str,
) -> dict[str, Any]:
    """The object after ``manager`` applies ``config`` to ``live`` (None: create).
    Raises ApplyConflict listing (other manager, field) pairs unless ``force``."""
    entries = read_entries(live) if live else {}
    previous = list((live or {}).get("metadata", {}).get("managedFields") or [])
    key = (manager, "Apply", "")
    wanted = leaves(config)
    conflicts: list[tuple[str, Path]] = []
    for other, paths in entries.items():
        if other == key:
            continue
        for owned in paths:
            for path, value in wanted.items():
                if _related(owned, path) and _value_at(live, path) != value:
                    conflicts.append((other[0], path))
    if conflicts and not force:
        raise ApplyConflict(sorted(set(conflicts)))
    conflicting = {path for _, path in conflicts}
    for other in entries:
        if other != key:
            entries[other] = {
                p for p in entries[other] if not any(_related(p, c) for c in conflicting)
            }
    result = clone(live) if live else {"metadata": {}}
    owned_by_others = (
        set().union(*(p for k, p in entries.items() if k != key)) if entries else set()
    )
    for path in entries.get(key, set()) - set(wanted):
        if path not in owned_by_others:
            _delete_path(result, path)
    for section, value in config.items():
        if section == "metadata":
            for meta_key in _TRACKED_METADATA:
                if meta_key in value:
                    current = result["metadata"].get(meta_key)
                    if isinstance(value[meta_key], dict) and isinstance(current, dict):
                        deep_merge(current, value[meta_key])
                    else:
                        result["metadata"][meta_key] = clone(value[meta_key])
        elif section != "status":
            if isinstance(value, dict) and isinstance(result.get(section), dict):
                deep_merge(result[section], value)
            else:
                result[section] = clone(value)
    entries[key] = set(wanted)
    present = set(leaves(result)) | set(status_leaves(result))
    for entry_key in entries:
        entries[entry_key] = {p for p in entries[entry_key] if p in present}
    unchanged_owners = live is not None and entries == read_entries(live)
    write_entries(result, entries, previous, set() if unchanged_owners else {key}, now)
    return result
