"""The deep-queue scenarios' number of rounds, read from BENCH_ADMISSION_REPEATS."""

from __future__ import annotations

import pytest

from benchmarks.admission import REPEATS_VARIABLE, repeats_from_environment


def test_five_rounds_unless_told(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(REPEATS_VARIABLE, raising=False)
    assert repeats_from_environment() == 5
    monkeypatch.setenv(REPEATS_VARIABLE, "")
    assert repeats_from_environment() == 5
    monkeypatch.setenv(REPEATS_VARIABLE, " 3 ")
    assert repeats_from_environment() == 3


@pytest.mark.parametrize("raw", ["0", "-2", "two", "1.5", "\u00b2"])
def test_a_count_that_is_not_a_whole_number_of_rounds_is_refused(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(REPEATS_VARIABLE, raw)
    with pytest.raises(SystemExit, match=f"{REPEATS_VARIABLE} must be a whole number"):
        repeats_from_environment()
