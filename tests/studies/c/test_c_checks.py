"""Paper C's checks on random heads (claims C-1 … C-3, spec §C7.1-§C7.3): what they measure passes at the
spec's settings, and a check fails when its threshold is out of reach."""

from __future__ import annotations

import pytest

from posym.pipeline import config
from posym.studies.c import checks


@pytest.fixture(scope="module")
def section():
    return config.validate({"studies": ["c"]})["c"]["checks"]


@pytest.fixture(scope="module")
def measured(section):
    return checks.measure(section)


def test_the_defaults_are_the_spec_s(section):
    assert (section["random_null"]["d"], section["random_null"]["k"], section["random_null"]["draws"]) == (768, 64, 300)
    assert section["gauge"]["tolerance"] == 1e-10 and section["rope"]["tolerance"] == 1e-6


def test_c1_the_null_sits_at_the_published_values(measured):
    rows = measured[measured["claim"] == "C-1"].set_index("check")["measured"]
    assert len(rows) == 4
    for check, value in rows.items():
        assert value == pytest.approx(0.707 if "dir_frac" in check else 0.61, abs=0.01 if "dir_frac" in check else 0.02), check
    c1 = checks.claim_c1(measured)
    assert (c1["verdict"] == "pass").all()
    assert sorted(set(c1["paper"])) == [0.61, 0.707] and (c1["difference"].abs() <= 0.02).all()  # the published null means


def test_c2_the_gauge_moves_the_weights_not_the_spectrum(measured):
    rows = measured[measured["claim"] == "C-2"]
    assert (rows.loc[rows["kind"] == "max", "measured"] < 1e-10).all()
    assert rows.loc[rows["kind"] == "min", "measured"].iloc[0] > 0.01
    assert (checks.claim_c2(measured)["verdict"] == "pass").all()


def test_c3_the_rope_identities_hold_for_both_pairings(measured):
    rows = measured[measured["claim"] == "C-3"]
    assert set(rows["pairing"]) == {"interleaved", "rotate_half"} and len(rows) == 6
    float32 = rows[rows["check"].str.contains("float32")]
    assert (float32["measured"] < 1e-6).all() and (float32["measured"] > 0).all()  # float32 rounding, not exact
    assert (rows.loc[rows["check"].str.contains("closed-form"), "measured"] < 1e-12).all()
    verdicts = checks.claim_c3(measured)
    assert (verdicts["verdict"] == "pass").all() and verdicts["check"].str.contains("rotate_half").sum() == 3


def test_a_check_can_fail(section, measured):
    strict = {**section, "rope": {**section["rope"], "tolerance": 1e-12}, "random_null": {**section["random_null"], "targets": {"dir_frac": [0.5, 0.01], "D_head": [0.61, 0.02]}}}
    measured = checks.measure(strict)
    c1, c3 = checks.claim_c1(measured), checks.claim_c3(measured)
    assert (c1[c1["check"].str.contains("dir_frac")]["verdict"] == "fail").all()
    assert (c3[c3["check"].str.contains("float32")]["verdict"] == "fail").all()
    assert (c3[c3["check"].str.contains("closed-form")]["verdict"] == "pass").all()
