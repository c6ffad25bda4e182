"""The changes a report opens with (posym.pipeline.changes.compare), on hand-made report folders."""

import json

from posym.pipeline import changes


def _report(root, version, studies, config, modules):
    folder = root / version
    folder.mkdir()
    manifest = {
        "version": version,
        "studies": {sid: {"items": {f"{sid.upper()}-1": {"applicable": True}}} for sid in studies},
        "verdicts": {sid: [{"claim": f"{sid.upper()}-1", "verdict": "reproduced"}] for sid in studies},
        "files": {f"{sid}/tables/claims.csv": "sha-" + version for sid in studies},
        "config": config,
        "code": {"label": version, "modules": modules, "commands": {f"{sid} train": "h" for sid in studies}},
    }
    (folder / "manifest.json").write_text(json.dumps(manifest))
    for sid in studies:
        (folder / sid / "tables").mkdir(parents=True)
        (folder / sid / "tables" / "claims.csv").write_text("claim,ours\nX,1.0\n")
    return folder


def test_a_study_only_one_report_holds_is_named_not_listed_item_by_item(tmp_path):
    before = _report(
        tmp_path, "v1", ["b"], {"studies": ["b"], "b": {"lr": 1}, "report": {"title": "t", "note": None}},
        {"posym.studies.b.deposit": "1", "posym.pipeline.report": "1"},
    )
    after = _report(
        tmp_path, "v2", ["c"], {"studies": ["c"], "c": {"steps": 6000}, "report": {"title": "t", "extra": 1}},
        {"posym.studies.b.deposit": "2", "posym.studies.c.training": "1", "posym.pipeline.report": "2"},
    )
    found = changes.compare(before, after)
    assert found["studies_only_before"] == ["b"] and found["studies_only_after"] == ["c"]
    assert not found["verdicts"] and not found["items_added"] and not found["items_removed"]
    assert not found["tables_added"] and not found["tables_removed"]
    assert found["code"]["modules"] == {"changed": ["posym.pipeline.report"], "added": [], "removed": []}
    assert found["config"] == [
        {"key": "report.extra", "after": 1},  # added: no 'before'
        {"key": "report.note", "before": None},  # removed, though its value was null
        {"key": "studies", "before": ["b"], "after": ["c"]},
    ]
    text = changes.text(found)
    assert "only in v1: b" in text and "only in v2: c" in text
    assert "report.extra: absent → 1" in text and "report.note: None → absent" in text


def test_a_shared_study_is_compared_item_by_item(tmp_path):
    before = _report(tmp_path, "v1", ["b", "c"], {"c": {"steps": 4000}}, {})
    after = _report(tmp_path, "v2", ["c"], {"c": {"steps": 6000}}, {})
    (after / "c" / "tables" / "claims.csv").write_text("claim,ours\nX,2.0\n")
    found = changes.compare(before, after)
    assert found["studies_only_before"] == ["b"] and not found["studies_only_after"]
    assert [t["table"] for t in found["tables_moved"]] == ["c/tables/claims.csv"]
    assert found["config"] == [{"key": "c.steps", "before": 4000, "after": 6000}]
