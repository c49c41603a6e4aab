"""Reasons are English text that can be said again in another language: the engine's
words are unchanged, and a Wording keeps its template and values through JSON."""

from __future__ import annotations

import copy
import json

from i18n.wording import Wording
from scheduler_bridge.admission import reasons
from scheduler_bridge.admission.model import Topology

# a stand-in catalogue: two templates and one plural pair said in another language
CATALOGUE = {
    "quota of %(flavour)s used %(used)s/%(ceiling)s (guaranteed %(guaranteed)s, "
    "borrowing limit %(limit)s); needs %(need)s": "QUOTA %(flavour)s %(used)s/%(ceiling)s",
    "needs %(shape)s; the whole cluster holds %(pods)s": "NEEDS %(shape)s HOLDS %(pods)s",
    "%(pods)s x %(per_pod)s %(flavour)s": "%(pods)s*%(per_pod)s %(flavour)s",
}
PLURALS = {("%(count)s pod", "%(count)s pods"): "%(count)s P"}


def gettext(message: str) -> str:
    return CATALOGUE.get(message, message)


def ngettext(singular: str, plural: str, count: int) -> str:
    return PLURALS.get((singular, plural), singular if count == 1 else plural)


def test_a_reason_is_its_english_text() -> None:
    reason = reasons.QuotaReasons.own_limit("h100", used=2, guaranteed=2, limit=1, need=2)
    assert reason == "quota of h100 used 2/3 (guaranteed 2, borrowing limit 1); needs 2"
    assert isinstance(reason, str) and f"{reason}" == reason


def test_plural_forms_follow_the_count_in_english() -> None:
    assert reasons.node_never("h100", 1, 8, Topology.NONE, 8, 0) == (
        "needs 1 pod x 8 h100; the largest node has 8"
    )
    assert reasons.node_never("h100", 3, 8, Topology.NONE, 8, 1) == (
        "needs 3 pods x 8 h100; the whole cluster holds 1 such pod"
    )
    assert reasons.preempting(2, ["speech"], "h100", reclaim=True).startswith(
        "preempting 2 workloads of speech"
    )


def test_a_reason_is_said_again_with_another_catalogue_nested_parts_included() -> None:
    reason = reasons.node_never("h100", 3, 8, Topology.NONE, 8, 2)
    assert reason.render(gettext, ngettext) == "NEEDS 3 P*8 h100 HOLDS 2 such pods"
    quota = reasons.QuotaReasons.own_limit("h100", used=2, guaranteed=2, limit=1, need=2)
    assert quota.render(gettext, ngettext) == "QUOTA h100 2/3"


def test_durations_are_numbers_until_they_are_said() -> None:
    reason = reasons.reserved("train-7", start=1000.0 + 750, now=1000.0)
    assert reason == (
        "reserved for job train-7 (expected start in ~12 min); a declared max run time "
        "under 12 min would let it backfill"
    )
    units = {"%(minutes).0f min": "%(minutes).0f MINUTES"}
    said = reason.render(lambda m: units.get(m, m), ngettext)
    assert "~12 MINUTES" in said and "under 12 MINUTES" in said


def test_a_wording_survives_json_and_copies_and_options_stay_one_text() -> None:
    reason = reasons.options(
        [
            ("h100", reasons.QuotaReasons.no_quota("h100", "vision")),
            ("a100", reasons.reservation_held(4, "a100", [f"n{i}" for i in range(6)], None, 0)),
        ]
    )
    assert reason == (
        "h100: no quota for h100: neither vision nor its parents have one; a100: holding a "
        "reservation for 4 a100 on n0, n1, n2, n3 and 2 more; expected start unknown"
    )
    assert isinstance(reason, Wording)
    again = Wording.parse(json.loads(json.dumps(reason.to_json())))
    assert again == reason and again is not None and again.to_json() == reason.to_json()
    assert copy.deepcopy(reason).to_json() == reason.to_json()  # copied as pickle does


def test_stored_words_that_do_not_fit_their_template_are_refused() -> None:
    assert Wording.parse({}) is None
    assert Wording.parse({"template": "needs %(need)s", "params": {"other": 1}}) is None
    assert Wording.parse({"template": "x %(a)s", "params": {"a": [1]}}) is None
    assert Wording.parse({"template": "x %(a)s", "params": {"a": 1}}) == "x 1"


def test_elastic_and_reservation_reasons_keep_their_english_and_their_words() -> None:
    from scheduler_bridge.admission.elastic import elastic_reason
    from scheduler_bridge.admission.model import (
        PendingDecision,
        PendingWorkload,
        PodSet,
        ReasonCode,
    )

    request = PendingWorkload(
        id="w", tenant_id="team", pod_sets=(PodSet(8, 1, ("h100",), min_count=4),)
    )
    waiting = PendingDecision(
        workload_id="w~main~2",
        tenant_id="team",
        position=1,
        tenant_position=1,
        code=ReasonCode.NODE_CAPACITY,
        message=reasons.fits_now(),
    )
    said = elastic_reason(request, 6, [waiting])
    assert said == (
        "running 6 of 8 pods (at least 4): 2 wait for GPUs nobody else needs "
        "(fits now; will be tried in the next cycle)"
    )
    assert isinstance(said, Wording) and Wording.parse(json.loads(json.dumps(said.to_json())))
    assert said.render(lambda m: f"<{m}>", ngettext) == (
        "<<running 6 of 8 pods (at least 4)>: 2 wait for GPUs nobody else needs "
        "(<fits now; will be tried in the next cycle>)>"
    )
    started = reasons.admitted_reservation(reasons.admitted_within("h100", 4, 8))
    assert started == "within guarantee: 4/8 h100 in use; started on the GPUs reserved for it"
    assert started.render(lambda m: f"<{m}>", ngettext) == (
        "<<within guarantee: 4/8 h100 in use>; started on the GPUs reserved for it>"
    )
