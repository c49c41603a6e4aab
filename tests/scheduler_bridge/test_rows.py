"""RememberedRows: rows read once, then again only where somebody wrote them."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from scheduler_bridge.inventory.models import Cluster, Node
from scheduler_bridge.rows import RememberedRows, update_rows

pytestmark = pytest.mark.django_db


def _nodes(count: int) -> Cluster:
    cluster = Cluster.objects.create(name="rows")
    Node.objects.bulk_create(
        Node(cluster=cluster, name=f"n{i}", labels={"i": str(i)}) for i in range(count)
    )
    return cluster


def _read(remembered: RememberedRows, cluster: Cluster) -> dict[str, dict]:
    with transaction.atomic():
        rows = remembered.read(Node.objects.select_for_update().filter(cluster=cluster))
    return {row["name"]: row for row in rows}


def test_rows_written_by_someone_else_are_read_again_the_others_are_not() -> None:
    cluster = _nodes(3)
    remembered = RememberedRows(Node, ["name", "labels"])
    first = _read(remembered, cluster)
    assert first["n1"]["labels"] == {"i": "1"}
    Node.objects.filter(name="n1").update(labels={"i": "edited"})
    Node.objects.filter(name="n2").delete()
    with CaptureQueriesContext(connection) as queries:
        second = _read(remembered, cluster)
    assert set(second) == {"n0", "n1"}  # the deleted row is gone
    assert second["n1"]["labels"] == {"i": "edited"}
    assert second["n0"] is first["n0"]  # unchanged: not decoded again
    fetched = [q["sql"] for q in queries if '"labels"' in q["sql"]]
    assert len(fetched) == 1 and "IN (" in fetched[0]  # only the moved row, by id


def test_what_was_just_written_is_remembered_with_its_new_version() -> None:
    cluster = _nodes(2)
    remembered = RememberedRows(Node, ["name", "labels"])
    _read(remembered, cluster)
    n0 = Node.objects.get(name="n0")
    with transaction.atomic():
        rows = [{"id": n0.pk, "labels": {"i": "written"}}]
        update_rows(Node, rows, {"labels": "jsonb"})
        remembered.wrote(rows)
    with CaptureQueriesContext(connection) as queries:
        again = _read(remembered, cluster)
    assert again["n0"]["labels"] == {"i": "written"}
    assert not [q for q in queries if '"labels"' in q["sql"]]  # nothing read in full
    # a write that is rolled back leaves the row's version, so the next read is right
    with pytest.raises(RuntimeError), transaction.atomic():
        rows = [{"id": n0.pk, "labels": {"i": "rolled back"}}]
        update_rows(Node, rows, {"labels": "jsonb"})
        remembered.wrote(rows)
        raise RuntimeError
    assert _read(remembered, cluster)["n0"]["labels"] == {"i": "written"}
