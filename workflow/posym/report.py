"""The versioned report: ``reports/<version>/index.html`` with figures, tables, notebooks, manifest.

The page opens with a checklist of every table and figure of paper A (rendered or not yet),
followed by one section per item. Every string that comes from configuration or data is
HTML-escaped. A version directory is written once, in one rename, and never overwritten.
"""

from __future__ import annotations

import datetime as _dt
import html
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import pandas as pd

from . import claims, paper
from .files import read_json, sha256_file, write_json, write_text
from .provenance import code_version, package_versions


class ReportExists(RuntimeError):
    pass


@dataclass
class _Artifact:
    """A figure or table with its caption (and, for tables, the rendered HTML)."""

    path: Path
    caption: str
    html: str = ""

    @property
    def name(self):
        return self.path.name

    @property
    def stem(self):
        return self.path.stem


def _performance_html(path: Path) -> "_Artifact":
    """A benchmark's JSON ``summary`` as a two-column table."""
    data = read_json(path)
    rows = "".join(f"<tr><td>{_esc(k)}</td><td>{_esc(v)}</td></tr>" for k, v in data.get("summary", {}).items())
    machine = data.get("machine", {})
    caption = f"{path.stem} — {', '.join(f'{k}: {v}' for k, v in machine.items())}" if machine else path.stem
    return _Artifact(path, caption, f'<table class="table"><tbody>{rows}</tbody></table>')


@dataclass
class Section:
    key: str
    title: str
    content: str
    figures: list[_Artifact] = field(default_factory=list)
    tables: list[_Artifact] = field(default_factory=list)


def _esc(value) -> str:
    return html.escape(str(value), quote=True)


def _caption(captions: Path | None, stem: str) -> str:
    if captions is None:
        return ""
    path = Path(captions) / f"{stem}.rst"
    return path.read_text(encoding="utf-8").strip() if path.is_file() else ""


def _table_html(csv: Path) -> str:
    frame = pd.read_csv(csv)
    return frame.to_html(index=False, escape=True, na_rep="", float_format=lambda v: f"{v:.4g}", border=0, classes="table")


def group_by_item(paths: Iterable[Path]) -> tuple[dict[str, list[Path]], list[Path]]:
    """Files per paper item key (by name prefix), and the files that belong to none."""
    keys = [item["key"] for item in paper.ITEMS]
    grouped: dict[str, list[Path]] = {k: [] for k in keys}
    other = []
    for path in sorted(Path(p) for p in paths):
        key = next((k for k in keys if path.name.startswith(f"{k}_")), None)
        (grouped[key] if key else other).append(path)
    return grouped, other


def manifest(
    *,
    version: str,
    config: dict,
    repo: Path,
    data: Iterable[Path],
    checkpoints: Iterable[Path],
    benchmarks: Iterable[Path],
) -> dict:
    """Provenance of a report: code, config, packages, data and checkpoint hashes, wall times."""
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
    return {
        "version": version,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "code": code_version(repo),
        "config": config,
        "packages": package_versions(),
        "data": data_entries,
        "checkpoints": checkpoint_entries,
        "wall_seconds": wall,
        "total_wall_seconds": sum(wall.values()),
    }


def render(
    title: str,
    version: str,
    sections: list[Section],
    notebooks: list[Path],
    manifest_data: dict,
    status: dict[str, bool],
    claim_summary: pd.DataFrame,
) -> str:
    claim_rows = []
    for c in claim_summary.itertuples(index=False):
        anchor = f'<a href="#claims">{_esc(c.verdict)}</a>' if c.verdict != "not tested" else "not tested"
        claim_rows.append(
            f"<tr><td>{_esc(c.claim)}</td><td>{_esc(c.statement)}</td><td>{_esc(c.paper)}</td>"
            f"<td>{_esc(c.ours)}</td><td class=\"verdict-{_esc(c.verdict.replace(' ', '-'))}\">{anchor}</td></tr>"
        )
    rows = []
    for item in paper.ITEMS:
        rendered = status.get(item["key"], False)
        link = f'<a href="#{_esc(item["key"])}">rendered</a>' if rendered else "not yet"
        rows.append(f"<tr><td>{_esc(item['id'])}</td><td>{_esc(item['content'])}</td><td>{link}</td></tr>")
    body = [
        f"<h1>{_esc(title)}</h1>",
        f"<p>Version <code>{_esc(version)}</code> · commit <code>{_esc(manifest_data['code'].get('commit'))}</code>"
        f" · created {_esc(manifest_data['created'])} · <a href=\"manifest.json\">manifest</a></p>",
        "<h2 id=\"summary\">Paper A's claims (spec §A12)</h2>",
        "<table class=\"table\"><thead><tr><th>claim</th><th>statement</th><th>paper</th><th>ours</th><th>verdict</th></tr></thead><tbody>",
        *claim_rows,
        "</tbody></table>",
        "<h2 id=\"checklist\">Paper A: tables and figures</h2>",
        "<table class=\"table\"><thead><tr><th>item</th><th>content</th><th>status</th></tr></thead><tbody>",
        *rows,
        "</tbody></table>",
    ]
    for section in sections:
        body.append(f"<h2 id=\"{_esc(section.key)}\">{_esc(section.title)}</h2>")
        if section.content:
            body.append(f"<p>{_esc(section.content)}</p>")
        for figure in section.figures:
            body.append(
                f"<figure><img src=\"figures/{_esc(figure.name)}\" alt=\"{_esc(figure.stem)}\" style=\"max-width:100%\">"
                f"<figcaption>{_esc(figure.caption)} (<a href=\"figures/{_esc(figure.stem)}.svg\">svg</a>)</figcaption></figure>"
            )
        for table in section.tables:
            if table.path.suffix == ".json":
                links = f'<a href="benchmarks/{_esc(table.name)}">json</a>'
            else:
                links = f'<a href="tables/{_esc(table.name)}">csv</a>, <a href="tables/{_esc(table.stem)}.md">markdown</a>'
            body.append(f"<p>{_esc(table.caption)} ({links})</p>")
            body.append(table.html)
    if notebooks:
        body.append("<h2 id=\"notebooks\">Executed notebooks</h2><ul>")
        body += [f"<li><a href=\"notebooks/{_esc(n.name)}\">{_esc(n.name)}</a></li>" for n in notebooks]
        body.append("</ul>")
    style = (
        "body{font-family:sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}"
        "table.table{border-collapse:collapse;margin:0.5em 0 1.5em}"
        ".table td,.table th{border-bottom:1px solid #ddd;padding:3px 8px;text-align:left;font-size:0.9em}"
        ".verdict-pass{color:#1e7b34}.verdict-fail{color:#b03a2e}.verdict-partly{color:#b9770e}"
        "figcaption{font-size:0.9em;color:#444}"
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_esc(title)}</title><style>{style}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def build(
    out: Path,
    *,
    version: str,
    title: str,
    config: dict,
    repo: Path,
    figures: Iterable[Path],
    tables: Iterable[Path],
    notebooks: Iterable[Path],
    data: Iterable[Path] = (),
    checkpoints: Iterable[Path] = (),
    benchmarks: Iterable[Path] = (),
    performance: Iterable[Path] = (),
    captions: Path | None = None,
) -> Path:
    """Write the report directory ``out`` (must not exist or be empty) in one rename."""
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ReportExists(f"{out} already exists; a report version is never overwritten")
    figures, tables, notebooks = [Path(p) for p in figures], [Path(p) for p in tables], [Path(p) for p in notebooks]
    info = manifest(version=version, config=config, repo=repo, data=data, checkpoints=checkpoints, benchmarks=benchmarks)

    pngs = [f for f in figures if f.suffix == ".png"]
    csvs = [t for t in tables if t.suffix == ".csv" and not t.name.startswith("claims_")]
    claim_tables = sorted(t for t in tables if t.suffix == ".csv" and t.name.startswith("claims_"))
    claim_summary = claims.summary([pd.read_csv(t, dtype=str, keep_default_na=False) for t in claim_tables])
    fig_groups, fig_other = group_by_item(pngs)
    tab_groups, tab_other = group_by_item(csvs)
    sections, status = [], {}
    for item in paper.ITEMS:
        key = item["key"]
        figs, tabs = fig_groups[key], tab_groups[key]
        status[key] = bool(figs or tabs)
        if status[key]:
            sections.append(
                Section(
                    key,
                    f"{item['id']}: {item['content']}",
                    "",
                    [_Artifact(f, _caption(captions, f.stem)) for f in figs],
                    [_Artifact(t, _caption(captions, t.stem), _table_html(t)) for t in tabs],
                )
            )
    if claim_tables:
        sections.insert(
            0,
            Section(
                "claims",
                "Claim checks",
                "Each check of spec §A12 per task and seed; with several seeds a row per check says how many pass.",
                [],
                [_Artifact(t, _caption(captions, t.stem), _table_html(t)) for t in claim_tables],
            ),
        )
    performance_tables = [_performance_html(Path(p)) for p in performance]
    if performance_tables:
        sections.append(
            Section(
                "performance",
                "Performance benchmarks",
                "Measured by the scripts in benchmarks/ (each against a reference in the same run); see the JSON files for every number.",
                [],
                performance_tables,
            )
        )
    if fig_other or tab_other:
        sections.append(
            Section(
                "other",
                "Further results",
                "",
                [_Artifact(f, _caption(captions, f.stem)) for f in fig_other],
                [_Artifact(t, _caption(captions, t.stem), _table_html(t)) for t in tab_other],
            )
        )

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for folder, paths in (("figures", figures), ("tables", tables), ("notebooks", notebooks), ("benchmarks", [Path(p) for p in performance])):
            (tmp / folder).mkdir()
            for path in paths:
                shutil.copy2(path, tmp / folder / path.name)
        write_text(tmp / "index.html", render(title, version, sections, notebooks, info, status, claim_summary))
        info["files"] = {
            str(p.relative_to(tmp)): sha256_file(p) for p in sorted(tmp.rglob("*")) if p.is_file() and p.name != "manifest.json"
        }
        write_json(tmp / "manifest.json", info)
        for path in tmp.rglob("*"):
            if path.is_file():
                path.chmod(0o444)  # a report version is read-only once written
        os.chmod(tmp, 0o755)
        if out.exists():
            out.rmdir()  # empty: made by hand or left by an interrupted run
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out / "index.html"
