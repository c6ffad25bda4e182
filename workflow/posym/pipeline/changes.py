"""What changed between two report versions: verdicts, moved tables, items added or removed, and the code and
configuration differences behind them.

Every new report version opens with the changes since the report its results folder made before it (the folder's
history, ``results/reports/history.json``); ``posym report diff V1 V2`` shows the same for any two versions. Both
read only the versions' folders (``reports/<version>/``: the manifest and the tables).
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd

from posym.data.files import read_json, write_json
from posym.pipeline.code import changed_modules

#: A table's number has moved when it differs from the previous one by more than this (numpy.isclose): wide
#: enough to pass the last digits of a CSV round trip, narrow enough to show any change a rerun makes.
RELATIVE_TOLERANCE = 1e-6
ABSOLUTE_TOLERANCE = 1e-9


# ------------------------------------------------------------------------------------------------ history


def history(path: Path | str) -> list[str]:
    """The report versions a results folder made, oldest first (empty before its first)."""
    path = Path(path)
    return list(read_json(path)["versions"]) if path.is_file() else []


def previous(history_path: Path | str, reports: Path | str, version: str) -> str | None:
    """The report version the results folder made last before ``version``, where its folder still exists."""
    for made in reversed(history(history_path)):
        if made != version and (Path(reports) / made / "manifest.json").is_file():
            return made
    return None


def remember(history_path: Path | str, version: str) -> None:
    """Add ``version`` to the results folder's history (once in a row: a reused version is not listed again)."""
    made = history(history_path)
    if not made or made[-1] != version:
        write_json(history_path, {"versions": [*made, version]})


# ------------------------------------------------------------------------------------------------ comparison


def _flat(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            out.update(_flat(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def config_changes(before: Mapping, after: Mapping) -> list[dict]:
    """Every configuration key whose value differs, was added or was removed: key, before, after (a side that
    lacks the key has no entry, so that a removed key and a null value read apart)."""
    old, new = _flat(before), _flat(after)
    return [
        {"key": key, **({"before": old[key]} if key in old else {}), **({"after": new[key]} if key in new else {})}
        for key in sorted(old.keys() | new.keys())
        if key not in old or key not in new or old[key] != new[key]
    ]


def table_move(before: Path, after: Path) -> dict | None:
    """How a table's numbers moved: None where they did not (beyond the tolerance); else the count of cells that
    moved and the largest move (column, row, before, after), or what else differs (rows, columns, text)."""
    old, new = pd.read_csv(before), pd.read_csv(after)
    if list(old.columns) != list(new.columns):
        return {"cells": None, "what": f"columns {list(old.columns)} → {list(new.columns)}"}
    if len(old) != len(new):
        return {"cells": None, "what": f"{len(old)} rows → {len(new)}"}
    moved, largest, text = 0, None, 0
    for column in old.columns:
        a, b = old[column], new[column]
        if pd.api.types.is_numeric_dtype(a) and pd.api.types.is_numeric_dtype(b):
            x, y = a.to_numpy(float), b.to_numpy(float)
            far = ~np.isclose(x, y, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE, equal_nan=True)
            moved += int(far.sum())
            for row in np.flatnonzero(far):
                size = abs(y[row] - x[row]) if np.isfinite(x[row]) and np.isfinite(y[row]) else float("inf")
                if largest is None or size > largest["by"]:
                    largest = {"column": column, "row": int(row), "before": x[row], "after": y[row], "by": size}
        else:
            text += int((a.astype(str) != b.astype(str)).sum())
    if not moved and not text:
        return None
    what = f"{moved} numbers moved" + (f", {text} text cells changed" if text else "")
    return {"cells": moved, "text_cells": text, "what": what, "largest": largest}


def _verdicts(manifest: Mapping) -> dict[tuple[str, str], str]:
    return {(sid, row["claim"]): row["verdict"] for sid, rows in manifest.get("verdicts", {}).items() for row in rows}


def _items(manifest: Mapping) -> dict[tuple[str, str], bool]:
    return {
        (sid, item): entry["applicable"]
        for sid, study in manifest.get("studies", {}).items()
        for item, entry in study["items"].items()
    }


def _tables(manifest: Mapping) -> dict[str, str]:
    return {path: sha for path, sha in manifest.get("files", {}).items() if "/tables/" in path and path.endswith(".csv")}


def _study_of_module(name: str) -> str:
    """The study a fingerprinted module belongs to (``posym.studies.<study>.module[:function]``), else ''."""
    parts = name.split(":")[0].split(".")
    return parts[2] if parts[:2] == ["posym", "studies"] and len(parts) > 2 else ""


def _without(manifest: Mapping, studies: set[str]) -> dict:
    """The manifest's comparable parts less everything of ``studies``: their verdicts, items, files, config
    sections and modules. Commands stay: only those both reports ran are compared, and a study's commands run only
    where it does."""

    def keep(mapping: Mapping, study_of) -> dict:
        return {key: value for key, value in mapping.items() if study_of(key) not in studies}

    code = manifest.get("code", {})
    return {
        "version": manifest["version"],
        "verdicts": keep(manifest.get("verdicts", {}), str),
        "studies": keep(manifest.get("studies", {}), str),
        "files": keep(manifest.get("files", {}), lambda path: path.split("/")[0]),
        "config": keep(manifest.get("config", {}), str),
        "code": {
            "label": code.get("label"),
            "modules": keep(code.get("modules", {}), _study_of_module),
            "commands": code.get("commands", {}),
        },
    }


def compare(before: Path | str, after: Path | str) -> dict:
    """The changes from report version folder ``before`` to ``after`` (each with its manifest.json), over the
    studies both hold: a study only one holds is named, not listed item by item (a report of paper C made after
    one of paper B would otherwise list every B item, table and setting as removed)."""
    before, after = Path(before), Path(after)
    old, new = read_json(before / "manifest.json"), read_json(after / "manifest.json")
    studies_old, studies_new = set(old.get("studies", {})), set(new.get("studies", {}))
    only_one = studies_old ^ studies_new
    old, new = _without(old, only_one), _without(new, only_one)
    verdicts_old, verdicts_new = _verdicts(old), _verdicts(new)
    verdicts = [
        {"study": sid, "claim": claim, "before": verdicts_old.get((sid, claim)), "after": verdicts_new.get((sid, claim))}
        for sid, claim in sorted(verdicts_old.keys() | verdicts_new.keys())
        if verdicts_old.get((sid, claim)) != verdicts_new.get((sid, claim))
    ]
    items_old, items_new = _items(old), _items(new)
    shown_old = {k for k, applicable in items_old.items() if applicable}
    shown_new = {k for k, applicable in items_new.items() if applicable}
    tables_old, tables_new = _tables(old), _tables(new)
    moved = []
    for path in sorted(tables_old.keys() & tables_new.keys()):
        if tables_old[path] != tables_new[path] and (move := table_move(before / path, after / path)):
            moved.append({"table": path, **move})
    code_old, code_new = old["code"], new["code"]
    modules = changed_modules(code_old["modules"], code_new["modules"])
    commands_old, commands_new = code_old["commands"], code_new["commands"]
    return {
        "before": old["version"],
        "after": new["version"],
        "studies_only_before": sorted(studies_old - studies_new),
        "studies_only_after": sorted(studies_new - studies_old),
        "verdicts": verdicts,
        "items_added": [f"{sid} {item}" for sid, item in sorted(shown_new - shown_old)],
        "items_removed": [f"{sid} {item}" for sid, item in sorted(shown_old - shown_new)],
        "tables_moved": moved,
        "tables_added": sorted(tables_new.keys() - tables_old.keys()),
        "tables_removed": sorted(tables_old.keys() - tables_new.keys()),
        "code": {
            "commit": [code_old["label"], code_new["label"]],
            "modules": modules,
            "commands": sorted(c for c in commands_old.keys() & commands_new.keys() if commands_old[c] != commands_new[c]),
        },
        "config": config_changes(old["config"], new["config"]),
    }


# ------------------------------------------------------------------------------------------------ rendering


def _number(value) -> str:
    return "none" if value is None else f"{value:.6g}"


def _state(verdict: str | None) -> str:
    return "absent" if verdict is None else verdict


def _setting(change: Mapping, side: str) -> str:
    return repr(change[side]) if side in change else "absent"


def lines(changes: Mapping) -> list[tuple[str, list[str]]]:
    """The changes as headed lists of plain lines (the page and the command line both show these)."""
    sections = []
    only = [
        f"only in {changes[version]}: {', '.join(changes[key])} (not compared item by item)"
        for key, version in (("studies_only_before", "before"), ("studies_only_after", "after"))
        if changes.get(key)
    ]
    if only:
        sections.append(("Studies", only))
    if changes["verdicts"]:
        sections.append(("Verdicts that changed", [f"{v['study']} {v['claim']}: {_state(v['before'])} → {_state(v['after'])}" for v in changes["verdicts"]]))
    tolerance = f"beyond rtol {RELATIVE_TOLERANCE:g}, atol {ABSOLUTE_TOLERANCE:g}"
    moved = []
    for t in changes["tables_moved"]:
        text = f"{t['table']}: {t['what']}"
        if largest := t.get("largest"):
            text += f"; largest {largest['column']} row {largest['row']}: {_number(largest['before'])} → {_number(largest['after'])}"
        moved.append(text)
    if moved:
        sections.append((f"Tables whose numbers moved ({tolerance})", moved))
    added = [f"item {i}" for i in changes["items_added"]] + [f"table {t}" for t in changes["tables_added"]]
    removed = [f"item {i}" for i in changes["items_removed"]] + [f"table {t}" for t in changes["tables_removed"]]
    if added:
        sections.append(("Added", added))
    if removed:
        sections.append(("Removed", removed))
    code = changes["code"]
    code_lines = []
    if code["commit"][0] != code["commit"][1]:
        code_lines.append(f"code version {code['commit'][0]} → {code['commit'][1]}")
    for kind in ("changed", "added", "removed"):
        if code["modules"][kind]:
            code_lines.append(f"{kind}: {', '.join(code['modules'][kind])}")
    if code["commands"]:
        code_lines.append(f"commands whose code changed: {', '.join(code['commands'])}")
    if code_lines:
        sections.append(("Code", code_lines))
    if changes["config"]:
        sections.append(("Configuration", [f"{c['key']}: {_setting(c, 'before')} → {_setting(c, 'after')}" for c in changes["config"]]))
    return sections


def text(changes: Mapping) -> str:
    out = [f"changes from {changes['before']} to {changes['after']}"]
    sections = lines(changes)
    for heading, items in sections:
        out += ["", f"{heading}:", *(f"  - {item}" for item in items)]
    if not sections:
        out.append("no differences in verdicts, tables, items, code or configuration")
    return "\n".join(out) + "\n"


def html_section(changes: Mapping | None) -> list[str]:
    """The page's opening section: changes since the previous report of the results folder (or that there is none)."""
    if changes is None:
        return ['<h2 id="changes">Changes</h2>', "<p>The first report this results folder made: nothing to compare.</p>"]
    body = [
        '<h2 id="changes">Changes since ' + html.escape(changes["before"]) + "</h2>",
        f"<p>Since <code>{html.escape(changes['before'])}</code>, the report this results folder made before this one"
        f" (<code>posym report diff {html.escape(changes['before'])} {html.escape(changes['after'])}</code>).</p>",
    ]
    sections = lines(changes)
    for heading, items in sections:
        body.append(f"<h3>{html.escape(heading)}</h3><ul>")
        body += [f"<li>{html.escape(item)}</li>" for item in items]
        body.append("</ul>")
    if not sections:
        body.append("<p>No differences in verdicts, tables, items, code or configuration.</p>")
    return body


# ------------------------------------------------------------------------------------------------ same inputs


def input_differences(existing: Mapping, made: Mapping) -> list[str]:
    """What of the inputs two manifests of one version differ in (empty: identical inputs): the configuration, the
    code fingerprints, the data, checkpoints and models, the items shown, the tables' contents. Figures and executed
    notebooks are renderings of those and carry timestamps, so they are not compared."""
    differs = []
    if existing.get("config") != made.get("config"):
        differs.append("config (" + ", ".join(c["key"] for c in config_changes(existing.get("config", {}), made.get("config", {}))) + ")")
    if existing.get("code", {}).get("commands") != made.get("code", {}).get("commands"):
        differs.append("code fingerprints")
    for key in ("data", "checkpoints", "models", "studies"):
        if existing.get(key) != made.get(key):
            names = sorted(set(existing.get(key, {})) ^ set(made.get(key, {}))) or sorted(
                k for k in made.get(key, {}) if existing.get(key, {}).get(k) != made[key][k]
            )
            differs.append(f"{key} ({', '.join(names)})")
    old, new = _tables(existing), _tables(made)
    if tables := sorted(p for p in old.keys() | new.keys() if old.get(p) != new.get(p)):
        differs.append(f"tables ({', '.join(tables)})")
    return differs
