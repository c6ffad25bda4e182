"""The versioned report: ``reports/<version>/index.html`` with figures, tables, notebooks, manifest.

The page has a part per study, made from the study's plan (:meth:`posym.pipeline.study.Study.plan`, the table of its
items and claims applied to the configuration): the claims with their verdicts, a checklist of every table and
figure of the paper (rendered, or not applicable to this configuration and why), the claim checks, then one
section per item with our figures and tables and their captions. A study's files go to ``<study>/figures/``,
``<study>/tables/`` and ``<study>/notebooks/``. Every string that comes from configuration or data is
HTML-escaped. A version directory is written once, in one rename, and never overwritten: the job names its version
when it runs (:func:`posym.pipeline.provenance.report_version`); a version that exists already is reused where its
inputs are the same, and refused, naming what differs, where they are not. The page opens with the changes since
the report the results folder made before it (:mod:`posym.pipeline.changes`).
"""

from __future__ import annotations

import datetime as _dt
import html
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable

import pandas as pd

from posym.pipeline import changes, claims
from posym.pipeline import code as posym_code
from posym.pipeline import study as posym_study
from posym.data.files import read_json, sha256_file, write_json, write_text
from posym.pipeline.provenance import code_version, package_versions, report_version


class ReportExists(RuntimeError):
    pass


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _caption(path: str) -> str:
    return Path(path).read_text(encoding="utf-8").strip()


def _table_html(csv: Path) -> str:
    frame = pd.read_csv(csv)
    return frame.to_html(index=False, escape=True, na_rep="", float_format=lambda v: f"{v:.4g}", border=0, classes="table")


def _shown(value) -> str:
    """A machine field of a benchmark's JSON as its caption shows it: a mapping of flags (the CPU's bf16 / AMX
    units) as the names of those that are set."""
    if isinstance(value, dict):
        return " ".join(flag for flag, on in value.items() if on) or "none"
    return str(value)


def _performance_html(path: Path) -> str:
    """A benchmark's JSON ``summary`` as a two-column table, with the machine it ran on."""
    data = read_json(path)
    rows = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in data.get("summary", {}).items())
    machine = data.get("machine", {})
    caption = f"{path.stem} — {', '.join(f'{k}: {_shown(v)}' for k, v in machine.items())}" if machine else path.stem
    return (
        f"<p>{_esc(caption)} (<a href=\"benchmarks/{_esc(path.name)}\">json</a>)</p>"
        f'<table class="table"><tbody>{rows}</tbody></table>'
    )


def code_record(repo: Path, plan: list[dict]) -> dict:
    """The code a report's results came from: the code version, the fingerprint of each command of the core and
    of the studies shown, and of each notebook (posym.pipeline.code), and every module of them by its hash."""
    commands = {c: posym_code.command_code(c) for c in posym_code.core_commands()}
    for study in plan:
        commands.update({c: posym_code.command_code(c) for c in posym_code.study_commands(study["id"])})
        for name, source in notebook_sources(study).items():
            commands[f"notebook {study['id']}/{name}"] = posym_code.command_code("notebook", source)
    modules = {m: h for fingerprint in commands.values() for m, h in fingerprint.modules.items()}
    return {
        **code_version(repo),
        "commands": {c: f.digest for c, f in sorted(commands.items())},
        "modules": dict(sorted(modules.items())),
    }


def notebook_sources(study: dict) -> dict[str, str]:
    """The sources of the notebooks of a study's plan, by name."""
    notebooks = posym_study.load(study["id"]).notebooks
    return {Path(n).stem: str(notebooks[Path(n).stem].source) for n in study["notebooks"]}


def manifest(
    *,
    version: str,
    config: dict,
    plan: list[dict],
    repo: Path,
    data: Iterable[Path],
    checkpoints: Iterable[Path],
    benchmarks: Iterable[Path],
    models: Iterable[Path] = (),
) -> dict:
    """Provenance of a report: code, config, packages, the studies' items, data and checkpoint hashes, wall times,
    and what each converted pretrained model is (its verified manifest: source, quantisation, sha256)."""
    from posym.lm.pretrained import verify
    data_entries = {}
    for path in data:
        meta = read_json(path)
        meta.pop("vocab", None)
        data_entries[str(path)] = meta
    checkpoint_entries = {}
    for path in checkpoints:
        index = read_json(path)
        checkpoint_entries[str(path)] = {
            "fingerprint": index.get("fingerprint"),
            "train_seconds": index.get("train_seconds"),
            "device": index.get("device"),
            "checkpoints": [{"step": c["step"], "sha256": c["sha256"]} for c in index["checkpoints"]],
        }
    wall = {}
    for path in benchmarks:
        frame = pd.read_csv(path, sep="\t")
        wall[str(path)] = float(frame["s"].iloc[-1])
    code = code_record(repo, plan)

    def item_code(study: dict, row: dict) -> str | None:
        """The fingerprint of the code of the notebook that makes the row (posym.pipeline.code)."""
        return code["commands"].get(f"notebook {study['id']}/{row['notebook']}") if row["applicable"] else None

    studies = {
        study["id"]: {
            "name": study["name"],
            "items": {
                row["id"]: {
                    "applicable": row["applicable"],
                    "reason": row["reason"],
                    "files": _report_files(study["id"], row),
                    "code": item_code(study, row),
                }
                for row in [*study["items"], *study["claims"]]
            },
        }
        for study in plan
    }
    return {
        "version": version,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "code": code,
        "config": config,
        "studies": studies,
        "packages": package_versions(),
        "data": data_entries,
        "checkpoints": checkpoint_entries,
        "models": {str(path): verify(path) for path in models},
        "wall_seconds": wall,
        "total_wall_seconds": sum(wall.values()),
    }


def _report_files(study: str, row: dict) -> list[str]:
    """Where a row's files land in the report (nothing for a row that does not apply)."""
    if not row["applicable"]:
        return []
    return [f"{study}/{output['kind']}s/{Path(path).name}" for output in row["outputs"] for path in output["files"].values()]


# ------------------------------------------------------------------------------------------------- page


def _figure_html(study: str, output: dict) -> str:
    name = _esc(output["name"])
    return (
        f'<figure><img src="{study}/figures/{name}.png" alt="{name}" style="max-width:100%">'
        f'<figcaption>{_esc(_caption(output["caption"]))} (<a href="{study}/figures/{name}.svg">svg</a>)</figcaption></figure>'
    )


def _table_section(study: str, output: dict) -> str:
    name = _esc(output["name"])
    links = f'<a href="{study}/tables/{name}.csv">csv</a>, <a href="{study}/tables/{name}.md">markdown</a>'
    return f"<p>{_esc(_caption(output['caption']))} ({links})</p>" + _table_html(Path(output["files"]["csv"]))


def _outputs_html(study: str, outputs: list[dict]) -> list[str]:
    return [_figure_html(study, o) if o["kind"] == "figure" else _table_section(study, o) for o in outputs]


def _without_rows(row: dict) -> bool:
    """Whether an item has tables and every one of them has no rows: it rendered, but this configuration gave it
    nothing to show (paper B's RoPE-heads curve in a grid without partial RoPE)."""
    tables = [Path(o["files"]["csv"]) for o in row["outputs"] if o["kind"] == "table"]
    return bool(tables) and all(pd.read_csv(t).empty for t in tables)


def _status(study: str, row: dict) -> str:
    if row["applicable"]:
        what = "published values only" if row.get("published_only") else "rendered"
        if _without_rows(row):
            what = "rendered without data: no run of this configuration feeds it"
        return f'<a href="#{_esc(study)}-{_esc(row["key"])}">{what}</a>'
    return f'<span class="na">{_esc(row["reason"])}</span>'


def _checklist(study: str, rows: list[dict], heading: str) -> list[str]:
    if not rows:
        return []
    body = [
        f"<tr><td>{_esc(r['id'])}</td><td>{_esc(r['title'])}</td><td>{_esc(r['claim'] or '')}</td><td>{_status(study, r)}</td></tr>"
        for r in rows
    ]
    return [
        f"<h3>{_esc(heading)}</h3>",
        '<table class="table"><thead><tr><th>item</th><th>content</th><th>claim</th><th>status</th></tr></thead><tbody>',
        *body,
        "</tbody></table>",
    ]


def study_verdicts(study: dict) -> pd.DataFrame:
    """The claims summary of one study of the plan (posym.pipeline.claims.summary), from its claims' tables."""
    applicable = [c for c in study["claims"] if c["applicable"]]
    tables = [pd.read_csv(c["outputs"][0]["files"]["csv"], dtype=str, keep_default_na=False) for c in applicable]
    return claims.summary(tables, study["claims"], study.get("scale"))


def verdict_title(plan: list[dict], summaries: list[pd.DataFrame]) -> str:
    """The report's title from its verdicts: each study's headline (posym.pipeline.claims.headline)."""
    return "posym: " + " · ".join(claims.headline(s["name"], v, s.get("scale")) for s, v in zip(plan, summaries))


def _why_html(why: str) -> str:
    """A claim's failing and untested deciding checks (posym.pipeline.claims.why), below its count of checks."""
    return "".join(f'<div class="why">{_esc(part)}</div>' for part in why.split(" | ")) if why else ""


def scale_html(scale: dict | None) -> list[str]:
    """The line that says what size the study's trained claims were judged at, beside the paper's."""
    if not scale:
        return ['<p class="scale">Scale: this study does not state the size it trained at.</p>']
    mark = ' <strong class="below">Below the paper\'s size.</strong>' if scale.get("below") else ""
    return [f'<p class="scale">Scale: {_esc(scale["line"])}.{mark}</p>']


def study_html(study: dict, summary: pd.DataFrame) -> list[str]:
    """The part of the page of one study's plan: its verdicts in one line, claims, checklist, claim checks, one
    section per item."""
    sid = _esc(study["id"])
    name = study["name"]
    applicable_claims = [c for c in study["claims"] if c["applicable"]]
    claim_rows = []
    for c in summary.rename(columns={"judged at": "judged_at"}).itertuples(index=False):
        judged = c.verdict not in (claims.NOT_TESTABLE, claims.NOT_TESTABLE_AT_SIZE, claims.NOT_APPLICABLE)
        verdict = f'<a href="#{sid}-claims">{_esc(c.verdict)}</a>' if judged else _esc(c.verdict)
        claim_rows.append(
            f"<tr><td>{_esc(c.claim)}</td><td class=\"verdict-{_esc(c.verdict.replace(' ', '-'))}\">{verdict}</td>"
            f"<td>{_esc(c.distance) or '—'}</td><td>{_esc(c.statement)}</td><td>{_esc(c.paper)}</td><td>{_esc(c.evidence)}</td>"
            f"<td class=\"judged\">{_esc(c.judged_at)}</td><td>{_esc(c.ours)}{_why_html(c.why)}</td></tr>"
        )
    headline = claims.headline(name, summary, study.get("scale"))
    body = [
        f'<h2 id="{sid}">{_esc(name[0].upper() + name[1:])}: {_esc(study["title"])}</h2>',
        f"<p>{_esc(study['source'])}</p>",
        f'<p class="headline">{_esc(headline[0].upper() + headline[1:])}.</p>',
        *scale_html(study.get("scale")),
        f'<h3 id="{sid}-summary">Claims</h3>',
        '<div class="wide"><table class="table"><thead><tr><th>claim</th><th>verdict</th><th>farthest from the paper</th><th>statement</th>'
        "<th>paper</th><th>decided by</th><th>judged at</th><th>checks, and why not reproduced</th></tr></thead><tbody>",
        *claim_rows,
        "</tbody></table></div>",
        *_checklist(study["id"], [i for i in study["items"] if i["paper"]], "Tables and figures of the paper"),
        *_checklist(study["id"], [i for i in study["items"] if not i["paper"]], "posym's additions"),
    ]
    if applicable_claims:
        body.append(f'<h3 id="{sid}-claims">Claim checks</h3>')
        body.append(
            "<p>Each check per task and seed; with several seeds a row per check says how many pass. A check's kind of"
            " evidence is the claim's first unless its row names another.</p>"
        )
        for claim in applicable_claims:
            body += _outputs_html(study["id"], claim["outputs"])
    for item in study["items"]:
        if item["applicable"]:
            body.append(f'<h3 id="{sid}-{_esc(item["key"])}">{_esc(item["id"])}: {_esc(item["title"])}</h3>')
            body += _outputs_html(study["id"], item["outputs"])
    return body


def _evidence_html() -> list[str]:
    rows = "".join(f"<tr><td>{_esc(kind)}</td><td>{_esc(text)}</td></tr>" for kind, text in claims.EVIDENCE.items())
    return [
        '<h2 id="verdicts">How to read the verdicts</h2>',
        f"<p>A claim is <em>{claims.REPRODUCED}</em> when every check that decides it was tested and passes;"
        f" <em>{claims.PARTLY}</em> when some fail or were not tested; <em>{claims.NOT_REPRODUCED}</em> when none that was"
        f" tested passes; <em>{claims.NOT_TESTABLE_AT_SIZE}</em> when every deciding check reads a model that did not"
        f" learn its task at the size this run trained; <em>{claims.NOT_TESTABLE}</em> when no deciding check could run"
        f" here (the claims table says what it needs), or the claim is decided by code checks alone;"
        f" <em>{claims.NOT_APPLICABLE}</em> when its analysis does not apply to the configuration. Each claim names the"
        " kinds of evidence that decide it; checks of other kinds are supporting evidence and never make a claim"
        " reproduced. So is a check that a model which learned nothing would pass (a one-sided bound that chance"
        " accuracy meets, a property of initialisation): its row says why. Headlines count the claims decided on"
        " models this run trained apart from those decided by theory, the authors' released data, code or a"
        " substitute model, and every study says the size it trained at beside the paper's.</p>",
        f'<table class="table"><thead><tr><th>evidence</th><th>meaning</th></tr></thead><tbody>{rows}</tbody></table>',
    ]


def render(
    title: str | None,
    version: str,
    plan: list[dict],
    summaries: list[pd.DataFrame],
    manifest_data: dict,
    performance: list[Path],
    changed: list[str] = (),
) -> str:
    """The report page; ``summaries``: each study's verdicts (:func:`study_verdicts`); ``title`` None: computed
    from them (:func:`verdict_title`); ``changed``: the page's opening section, the changes since the previous
    report (posym.pipeline.changes.html_section)."""
    heading = title or verdict_title(plan, summaries)
    body = [
        f"<h1>{_esc(heading)}</h1>",
        f"<p>Version <code>{_esc(version)}</code> · commit <code>{_esc(manifest_data['code'].get('commit'))}</code>"
        f" · created {_esc(manifest_data['created'])} · <a href=\"manifest.json\">manifest</a>"
        ' · <a href="#verdicts">how to read the verdicts</a></p>',
        *changed,
    ]
    for study, summary in zip(plan, summaries):
        body += study_html(study, summary)
    body += _evidence_html()
    if performance:
        body.append('<h2 id="performance">Performance benchmarks</h2>')
        body.append("<p>Measured by the scripts in benchmarks/ (each against a reference in the same run); see the JSON files for every number.</p>")
        body += [_performance_html(p) for p in performance]
    notebooks = [(s["id"], Path(n).name) for s in plan for n in s["notebooks"]]
    if notebooks:
        body.append('<h2 id="notebooks">Executed notebooks</h2><ul>')
        body += [f'<li><a href="{_esc(sid)}/notebooks/{_esc(n)}">{_esc(sid)}/{_esc(n)}</a></li>' for sid, n in notebooks]
        body.append("</ul>")
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table.table{border-collapse:collapse;margin:0.5em 0 1.5em}"
        ".table td,.table th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;font-size:0.9em}"
        ".verdict-reproduced{color:#1e7b34}.verdict-not-reproduced{color:#b03a2e}.verdict-partly{color:#b9770e}"
        ".verdict-not-testable-here,.verdict-not-testable-at-this-size,.na{color:#777}.headline{font-weight:bold}"
        ".why{font-size:85%;color:#555;margin-top:.3em}.scale{color:#333}.below{color:#b03a2e}.judged{font-size:85%}"
        ".wide{overflow-x:auto}"
        "figcaption{font-size:0.9em;color:#444}"
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_esc(heading)}</title><style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def build(
    reports: Path,
    *,
    config: dict,
    plan: list[dict],
    repo: Path,
    history: Path,
    data: Iterable[Path] = (),
    checkpoints: Iterable[Path] = (),
    benchmarks: Iterable[Path] = (),
    performance: Iterable[Path] = (),
    models: Iterable[Path] = (),
) -> tuple[str, Path]:
    """Write the report version of ``config`` and the code of ``repo`` under ``reports`` in one rename, and add it
    to the results folder's ``history``; returns its version and page.

    Where that version exists already, it is reused when it was made from the same inputs
    (posym.pipeline.changes.input_differences) and refused, naming what differs, when it was not."""
    version = report_version(config, repo)
    out = Path(reports) / version
    performance = [Path(p) for p in performance]
    info = manifest(version=version, config=config, plan=plan, repo=repo, data=data, checkpoints=checkpoints, benchmarks=benchmarks, models=models)
    before = changes.previous(history, reports, version)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for study in plan:
            for row in [*study["items"], *study["claims"]]:
                if row["applicable"]:
                    for output in row["outputs"]:
                        for path in output["files"].values():
                            _copy(path, tmp / study["id"] / f"{output['kind']}s")
            for notebook in study["notebooks"]:
                _copy(notebook, tmp / study["id"] / "notebooks")
        for path in performance:
            _copy(path, tmp / "benchmarks")
        summaries = [study_verdicts(study) for study in plan]
        info["verdicts"] = {study["id"]: summary.to_dict("records") for study, summary in zip(plan, summaries)}
        info["scale"] = {study["id"]: study.get("scale") for study in plan}
        info["files"] = _hashes(tmp)
        if out.exists() and any(out.iterdir()):
            existing = read_json(out / "manifest.json")
            if differs := changes.input_differences(existing, info):
                raise ReportExists(
                    f"{out} already exists, made from other inputs: {'; '.join(differs)} differ. A report version is never"
                    " overwritten: commit the code (a new version) or move the old version away"
                )
            changes.remember(history, version)
            return version, out / "index.html"
        write_json(tmp / "manifest.json", info)  # read by the comparison below, rewritten once the page is made
        found = changes.compare(Path(reports) / before, tmp) if before else None
        info["changes"] = found
        page = render(config["report"]["title"], version, plan, summaries, info, performance, changes.html_section(found))
        write_text(tmp / "index.html", page)
        info["files"] = _hashes(tmp)
        write_json(tmp / "manifest.json", info)
        for path in tmp.rglob("*"):
            if path.is_file():
                path.chmod(0o444)  # a report version is read-only once written
        for path in [tmp, *(p for p in tmp.rglob("*") if p.is_dir())]:
            os.chmod(path, 0o755)
        if out.exists():
            out.rmdir()  # empty: made by hand or left by an interrupted run
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    changes.remember(history, version)
    return version, out / "index.html"


def _hashes(folder: Path) -> dict[str, str]:
    """Every file of a report folder but its manifest, by its sha256."""
    return {
        str(p.relative_to(folder)): sha256_file(p) for p in sorted(folder.rglob("*")) if p.is_file() and p.name != "manifest.json"
    }


def _copy(path: str | Path, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy2(path, folder / Path(path).name)
