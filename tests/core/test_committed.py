"""The README's table of the committed reports' verdicts is generated from the reports, never typed."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from conftest import REPO
from posym import cli
from posym.pipeline import claims, committed


def test_the_readme_shows_the_committed_reports_verdicts_as_generated():
    text = (REPO / "README.md").read_text()
    assert committed.readme_block(REPO / "reports") in text, "run `posym committed-verdicts` after committing a report"


def test_each_study_page_shows_its_newest_committed_reports_claims_as_generated():
    for sid, page in (("b", "paper_b.md"), ("c", "paper_c.md")):
        text = (REPO / "docs" / page).read_text()
        assert committed.study_block(REPO / "reports", sid) in text, f"run `posym committed-verdicts` (docs/{page})"


#: The committed paper-C reports and their C-4 verdict: the default run stops each seed 200 steps after it forms, so
#: its end-of-training checks are not judged; configs/c4_end.yaml trains every seed to the end.
C4_OF_COMMITTED = {"1929904-cfg9a144e8ca9": claims.PARTLY, "9fc02cf-cfg4b87140b4f": claims.REPRODUCED}


@pytest.mark.parametrize("name", sorted(C4_OF_COMMITTED))
def test_an_older_report_is_judged_again_from_its_own_check_tables(tmp_path, name):
    """A report from before manifests recorded their verdicts: a committed paper-C report without them."""
    older = tmp_path / name
    shutil.copytree(REPO / "reports" / name, older)
    manifest = json.loads((older / "manifest.json").read_text())
    recorded = pd.DataFrame(manifest.pop("verdicts")["c"]).set_index("claim")["verdict"]
    (older / "manifest.json").write_text(json.dumps(manifest))
    summaries, was_recorded = committed.report_verdicts(older)
    verdicts = summaries["c"].set_index("claim")["verdict"]
    assert not was_recorded
    assert verdicts.to_dict() == recorded.to_dict()  # its own check tables, judged again, give what it recorded
    assert verdicts["C-2"] == verdicts["C-3"] == claims.NOT_TESTABLE  # identities: code checks never decide
    assert verdicts["C-4"] == C4_OF_COMMITTED[name]
    assert verdicts["C-6"] == claims.NOT_TESTABLE and "configs/paper_c_offline.yaml" in summaries["c"].set_index("claim").loc["C-6", "ours"]


def test_a_report_that_records_its_verdicts_is_shown_as_recorded(tmp_path):
    reports = tmp_path / "reports"
    report = reports / "abc1234-cfg0123456789"
    report.mkdir(parents=True)
    verdicts = [
        {"claim": claim, "verdict": verdict, "distance": "", "evidence": "trained", "ours": "", "statement": "", "paper": ""}
        for claim, verdict in (("B-1", claims.REPRODUCED), ("B-2", claims.NOT_REPRODUCED))
    ]
    (report / "manifest.json").write_text(json.dumps({"created": "2026-12-04", "studies": {"b": {}}, "verdicts": {"b": verdicts}}))
    block = committed.readme_block(reports)
    assert "| [abc1234-cfg0123456789](reports/abc1234-cfg0123456789/index.html) | b | paper B: 1 of 2 trained claims reproduced, 1 not reproduced |" in block
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n{committed.BEGIN}\nstale\n{committed.END}\ntail\n")
    page = tmp_path / "docs" / "paper_b.md"
    page.parent.mkdir()
    begin, end = committed.study_markers("b")
    page.write_text(f"# B\n{begin}\n{end}\n")
    assert cli.main(["committed-verdicts", "--reports", str(reports), "--readme", str(readme), "--docs", str(page.parent)]) == 0
    assert readme.read_text() == f"# x\n{block}\ntail\n"
    table = page.read_text()
    assert "[`abc1234-cfg0123456789`](../reports/abc1234-cfg0123456789/index.html)" in table
    assert "| B-2 | **not reproduced** |" in table
    older = reports / "0000000-cfg0000000000"  # a second report of the study: both shown, the newest first
    older.mkdir()
    (older / "manifest.json").write_text(json.dumps({"created": "2026-12-01", "studies": {"b": {}}, "verdicts": {"b": verdicts[:1]}}))
    shown = committed.study_block(reports, "b")
    assert shown.index("abc1234-cfg0123456789") < shown.index("0000000-cfg0000000000") and shown.count("| B-1 |") == 2
    readme.write_text("# no block\n")
    with pytest.raises(ValueError, match="has no block"):
        committed.write_readme(readme, reports)
