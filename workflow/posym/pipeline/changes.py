"""What changed between two report versions: verdicts, moved tables, items added or removed, and the code and
configuration differences behind them.

Every new report version opens with the changes since the report its results folder made before it (the folder's
history, ``results/reports/history.json``); ``posym report diff V1 V2`` shows the same for any two versions. Both
read only the versions' folders (``reports/<version>/``: the manifest and the tables), and the studies'
``study.yaml`` for which tables are timings.

How tables are compared (:func:`table_move`):

- **Timings are not results.** A table of an item whose category in its study's ``study.yaml`` is one of
  :data:`TIMING_CATEGORIES` ("Compute": paper A's Table 4, wall times and hardware of the jobs) differs on every
  run and machine. Such a table is listed apart, as timings that differ, never among the tables whose numbers
  moved.
- **Identifier columns are keys, not measurements.** A column named like one of :data:`IDENTIFIER_COLUMNS`
  (seed, step, layer, head, n, samples, k, ...) says which run or row a number belongs to. It is never the
  "largest move", and its changes are named apart. Rows are matched by their key: the table's leading label
  (text) and identifier columns, as few of them as tell the rows apart in both tables; a row whose key only one
  table has is counted as added or removed. Where no key tells the rows apart, or no row's key is in both
  tables (a rerun with another seed), rows are compared in order.

Why claims changed (:func:`compare`, ``causes``): where a claim's verdict, its farthest check or its checks table
changed, the change names what differs in what produced the study's claims: the configuration keys of the study
(and the shared ones, less ``report``), the commands (core commands and the study's own) whose code fingerprints
differ with the modules that changed, and the package versions. Where none differs, it is said to be run-to-run
nondeterminism. A report that recorded no code fingerprints is compared by its commit.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import pandas as pd
import yaml

from posym import registry
from posym.data.files import read_json, write_json
from posym.pipeline.code import LOADED, changed_modules

#: A table's number has moved when it differs from the previous one by more than this (numpy.isclose): wide
#: enough to pass the last digits of a CSV round trip, narrow enough to show any change a rerun makes.
RELATIVE_TOLERANCE = 1e-6
ABSOLUTE_TOLERANCE = 1e-9

#: The study.yaml item categories whose tables are timings of the run (wall times, hardware), not results.
TIMING_CATEGORIES = frozenset({"Compute"})

#: Column names (compared lower-cased, stripped) that identify a row (which seed, step, layer, head, sample
#: count, ...) rather than measure something.
IDENTIFIER_COLUMNS = frozenset(
    {"seed", "seeds", "step", "layer", "head", "n", "samples", "k", "extra_tokens", "length", "window", "hops", "gamma", "theta"}
)

#: Top-level configuration sections that change nothing a claim is judged on.
NOT_RESULT_CONFIG = frozenset({"report"})

#: At most this many names in one line of the rendering (then "and N more").
SHOWN_NAMES = 8


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


def timing_tables(studies) -> set[str]:
    """The report paths (``<study>/tables/<name>.csv``) of the tables of ``studies`` that are timings: the
    outputs of their study.yaml items of a :data:`TIMING_CATEGORIES` category. A study whose study.yaml is
    missing or unreadable has none."""
    found = set()
    for sid in studies:
        try:
            table = yaml.safe_load((registry.folder(sid) / "study.yaml").read_text())
            rows = [*table.get("items", []), *table.get("claims", [])]
        except (OSError, yaml.YAMLError, AttributeError):
            continue
        for row in rows:
            if isinstance(row, Mapping) and row.get("category") in TIMING_CATEGORIES:
                outputs = row.get("outputs", [{"table": row["table"]}] if "table" in row else [])
                found |= {f"{sid}/tables/{o['table']}.csv" for o in outputs if isinstance(o, Mapping) and "table" in o}
    return found


def is_identifier(column: Any) -> bool:
    """Whether a column identifies rows (:data:`IDENTIFIER_COLUMNS`) rather than measures."""
    return str(column).strip().lower() in IDENTIFIER_COLUMNS


def _numeric(series: pd.Series) -> bool:
    return pd.api.types.is_numeric_dtype(series) and not pd.api.types.is_bool_dtype(series)


def _label(value: Any) -> str:
    """A cell as text, the same for 1 and 1.0 (an integer column read as floats where a cell is empty)."""
    if isinstance(value, (float, np.floating)) and np.isfinite(value) and float(value).is_integer():
        return str(int(value))
    return "" if value is None or (isinstance(value, (float, np.floating)) and np.isnan(value)) else str(value)


def _texts(series: pd.Series) -> list[str]:
    return [_label(v) for v in series.tolist()]


def _labels(frame: pd.DataFrame, columns: list) -> list[tuple[str, ...]]:
    return list(zip(*(_texts(frame[c]) for c in columns))) if columns else [() for _ in range(len(frame))]


def row_keys(old: pd.DataFrame, new: pd.DataFrame) -> list:
    """The columns that match the rows of two versions of a table: of the leading columns both have that are
    labels (text in either) or identifiers (:func:`is_identifier`), less those whose values the two tables share
    none of (a rerun with another seed), the fewest that tell every row apart in both tables; empty where none
    do."""
    shared = [c for c in old.columns if c in new.columns]
    leading = []
    for column in shared:
        if is_identifier(column) or not (_numeric(old[column]) and _numeric(new[column])):
            if set(_texts(old[column])) & set(_texts(new[column])) or not len(old) or not len(new):
                leading.append(column)
        else:
            break
    for count in range(1, len(leading) + 1):
        keys = leading[:count]
        if all(len(set(labels)) == len(labels) for labels in (_labels(old, keys), _labels(new, keys))):
            return keys
    return []


def _describe(keys: list, labels: tuple[str, ...], limit: int = 40) -> str:
    shown = [f"{k}={v if len(v) <= limit else v[: limit - 1] + '…'}" for k, v in zip(keys, labels) if v]
    return ", ".join(shown) or "the row with empty keys"


def _names(names, limit: int = SHOWN_NAMES) -> str:
    names = [str(n) for n in names]
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def table_move(before: Path, after: Path) -> dict | None:
    """How a table's numbers moved: None where nothing did (beyond the tolerance); else the count of numbers that
    moved (``cells``), of text cells that changed (``text_cells``), the rows added or removed and columns added or
    removed, the identifier columns whose values changed, and the largest move of a measurement (column, row of
    ``after``, its key, before, after; never an identifier column). Rows are matched by :func:`row_keys`, else
    in order."""
    old, new = pd.read_csv(before), pd.read_csv(after)
    shared = [c for c in old.columns if c in new.columns]
    columns_added = [c for c in new.columns if c not in old.columns]
    columns_removed = [c for c in old.columns if c not in new.columns]
    keys = keys_found = row_keys(old, new)
    labels_old, labels_new = _labels(old, keys), _labels(new, keys)
    where_old = {label: i for i, label in enumerate(labels_old)}
    common = [(where_old[label], j, label) for j, label in enumerate(labels_new) if keys and label in where_old]
    if keys and common:
        matched = "key"
        rows_removed = len(old) - len(common)
        rows_added = len(new) - len(common)
    elif len(old) == len(new):
        matched, keys = "order", []
        common = [(i, i, ()) for i in range(len(new))]
        rows_removed = rows_added = 0
    else:
        return {
            "cells": None, "text_cells": None, "what": f"{len(old)} rows → {len(new)}", "largest": None,
            "rows_added": None, "rows_removed": None, "columns_added": columns_added, "columns_removed": columns_removed,
        }
    rows_a = [i for i, _, _ in common]
    rows_b = [j for _, j, _ in common]
    moved, largest, text, identifiers = 0, None, 0, []
    for column in shared:
        if column in keys:
            continue
        a = old[column].iloc[rows_a].reset_index(drop=True)
        b = new[column].iloc[rows_b].reset_index(drop=True)
        if _numeric(a) and _numeric(b):
            x, y = a.to_numpy(float), b.to_numpy(float)
            far = ~np.isclose(x, y, rtol=RELATIVE_TOLERANCE, atol=ABSOLUTE_TOLERANCE, equal_nan=True)
        else:
            x = y = None
            far = np.array([p != q for p, q in zip(_texts(a), _texts(b))], dtype=bool)
        if not far.any():
            continue
        if is_identifier(column):
            identifiers.append(column)
            continue
        if x is None:
            text += int(far.sum())
            continue
        moved += int(far.sum())
        for row in np.flatnonzero(far):
            size = abs(y[row] - x[row]) if np.isfinite(x[row]) and np.isfinite(y[row]) else float("inf")
            if largest is None or size > largest["by"]:
                at = _describe(keys, common[row][2]) if matched == "key" else f"row {rows_b[row]}"
                largest = {"column": column, "row": int(rows_b[row]), "at": at,
                           "before": float(x[row]), "after": float(y[row]), "by": float(size)}
    if not (moved or text or identifiers or rows_added or rows_removed or columns_added or columns_removed):
        return None
    parts = [
        (text, f"{text} text cells changed"), (rows_removed, f"{rows_removed} rows removed"), (rows_added, f"{rows_added} rows added"),
        (columns_removed, f"columns removed: {_names(columns_removed)}"), (columns_added, f"columns added: {_names(columns_added)}"),
        (identifiers, f"identifiers changed: {_names(identifiers)}"),
    ]  # fmt: skip
    what = [f"{moved} numbers moved", *(line for present, line in parts if present)]
    if matched == "order" and len(new) > 1:
        what.append("rows compared in order" + (" (no row key in both)" if keys_found else ""))
    return {
        "cells": moved, "text_cells": text, "what": ", ".join(what), "largest": largest,
        "rows_added": rows_added, "rows_removed": rows_removed, "columns_added": columns_added,
        "columns_removed": columns_removed, "identifiers": identifiers, "keys": keys, "matched": matched,
    }


def _claim_rows(manifest: Mapping) -> dict[tuple[str, str], Mapping]:
    return {(sid, row["claim"]): row for sid, rows in manifest.get("verdicts", {}).items() for row in rows}


def _items(manifest: Mapping) -> dict[tuple[str, str], bool]:
    return {
        (sid, item): entry["applicable"]
        for sid, study in manifest.get("studies", {}).items()
        for item, entry in study["items"].items()
    }


def _item_files(manifest: Mapping) -> dict[tuple[str, str], list[str]]:
    return {
        (sid, item): list(entry.get("files", []))
        for sid, study in manifest.get("studies", {}).items()
        for item, entry in study["items"].items()
    }


def _tables(manifest: Mapping) -> dict[str, str]:
    return {path: sha for path, sha in manifest.get("files", {}).items() if "/tables/" in path and path.endswith(".csv")}


def _study_of_module(name: str) -> str:
    """The study a fingerprinted module belongs to (``posym.studies.<study>.module[:function]``), else ''."""
    parts = name.split(":")[0].split(".")
    return parts[2] if parts[:2] == ["posym", "studies"] and len(parts) > 2 else ""


def _module_serves(name: str, study: str) -> bool:
    """Whether a module can be part of the code of ``study``'s jobs: a core module, one of the study's own, or
    a study module the core loads for every study (posym.pipeline.code.LOADED: tasks, architectures,
    variants)."""
    owner = _study_of_module(name)
    parts = name.split(":")[0].split(".")
    return owner in ("", study) or (len(parts) > 3 and parts[3] in LOADED)


def _study_of_command(name: str, studies: set[str]) -> str:
    """The study a fingerprinted command belongs to (``b probe``, ``notebook b/accuracy``), else '' (a core
    command: ``train``, ``report build``)."""
    words = name.split()
    if len(words) > 1 and words[0] == "notebook":
        return words[1].split("/")[0]
    return words[0] if len(words) > 1 and words[0] in studies else ""


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
        "packages": manifest.get("packages", {}),
        "code": {
            "label": code.get("label"),
            "commit": code.get("commit"),
            "dirty": code.get("dirty"),
            "recorded": "commands" in code,
            "modules": keep(code.get("modules", {}), _study_of_module),
            "all_modules": code.get("modules", {}),
            "commands": code.get("commands", {}),
        },
    }


def causes(old: Mapping, new: Mapping, study: str, config: list[dict], studies: set[str]) -> dict:
    """What differs in what produced ``study``'s claims between two manifests (as :func:`_without` leaves them):
    the configuration keys (``config``: :func:`config_changes`) of the study and the shared sections (less
    :data:`NOT_RESULT_CONFIG`), the core and study commands whose code fingerprints differ (or that only one side
    ran) and the modules of theirs that changed, the package versions; ``same`` where none differs (then a change
    is run-to-run nondeterminism). Where a side recorded no fingerprints, ``code_recorded`` is false and the code
    counts as the same only for the same clean commit."""
    keys = [
        c["key"] for c in config
        if (top := c["key"].split(".")[0]) not in NOT_RESULT_CONFIG and (top == study or top not in studies)
    ]
    code_old, code_new = old["code"], new["code"]
    recorded = bool(code_old.get("recorded") and code_new.get("recorded"))
    commands, modules = [], []
    if recorded:
        ours = lambda name: _study_of_command(name, studies) in ("", study)  # noqa: E731
        a = {c: h for c, h in code_old["commands"].items() if ours(c)}
        b = {c: h for c, h in code_new["commands"].items() if ours(c)}
        commands = sorted(c for c in a.keys() | b.keys() if a.get(c) != b.get(c))
        if commands:
            found = changed_modules(
                {m: h for m, h in code_old["all_modules"].items() if _module_serves(m, study)},
                {m: h for m, h in code_new["all_modules"].items() if _module_serves(m, study)},
            )
            modules = sorted({*found["changed"], *found["added"], *found["removed"]})
        code_same = not commands
    else:
        code_same = bool(code_old.get("commit")) and code_old.get("commit") == code_new.get("commit") and not (
            code_old.get("dirty") or code_new.get("dirty")
        )
    packages = sorted(
        p for p in old.get("packages", {}).keys() | new.get("packages", {}).keys()
        if old.get("packages", {}).get(p) != new.get("packages", {}).get(p) and p != "posym"
    )
    return {
        "config": keys,
        "code_recorded": recorded,
        "commit": [code_old.get("label"), code_new.get("label")],
        "commands": commands,
        "modules": modules,
        "code_same": code_same,
        "packages": [
            {"package": p, "before": old.get("packages", {}).get(p), "after": new.get("packages", {}).get(p)} for p in packages
        ],
        "same": code_same and not keys and not packages,
    }


def compare(before: Path | str, after: Path | str) -> dict:
    """The changes from report version folder ``before`` to ``after`` (each with its manifest.json), over the
    studies both hold: a study only one holds is named, not listed item by item (a report of paper C made after
    one of paper B would otherwise list every B item, table and setting as removed), and the configuration
    sections of a study neither holds are not compared.

    ``verdicts``: every claim whose verdict, farthest check (``distance``), checks summary (``ours``) or checks
    table changed; ``causes``: for each study with such a claim, what differs in what produced it
    (:func:`causes`). ``tables_moved``: the result tables that moved; ``timings_moved``: the timing tables
    (:func:`timing_tables`) that differ."""
    before, after = Path(before), Path(after)
    old, new = read_json(before / "manifest.json"), read_json(after / "manifest.json")
    studies_old, studies_new = set(old.get("studies", {})), set(new.get("studies", {}))
    only_one = studies_old ^ studies_new
    known = set(registry.known()) | studies_old | studies_new
    neither = {sid for sid in known - (studies_old | studies_new) if sid in old.get("config", {}) or sid in new.get("config", {})}
    old, new = _without(old, only_one), _without(new, only_one)
    for manifest in (old, new):
        manifest["config"] = {k: v for k, v in manifest["config"].items() if k not in neither}
    tables_old, tables_new = _tables(old), _tables(new)
    timings = timing_tables(studies_old & studies_new)
    moved, timing_moved = [], []
    for path in sorted(tables_old.keys() & tables_new.keys()):
        if tables_old[path] != tables_new[path] and (move := table_move(before / path, after / path)):
            (timing_moved if path in timings else moved).append({"table": path, **move})
    moved_paths = {t["table"] for t in moved}
    rows_old, rows_new = _claim_rows(old), _claim_rows(new)
    files_old, files_new = _item_files(old), _item_files(new)
    verdicts = []
    for sid, claim in sorted(rows_old.keys() | rows_new.keys()):
        a, b = rows_old.get((sid, claim), {}), rows_new.get((sid, claim), {})
        entry = {"study": sid, "claim": claim, "before": a.get("verdict"), "after": b.get("verdict")}
        for field in ("distance", "ours"):
            if a and b and (a.get(field) or "") != (b.get(field) or ""):
                entry[field] = [a.get(field), b.get(field)]
        checks = sorted(
            p for p in {*files_old.get((sid, claim), []), *files_new.get((sid, claim), [])} if p in moved_paths
        )
        if checks:
            entry["checks_moved"] = checks
        if entry["before"] != entry["after"] or len(entry) > 4:
            verdicts.append(entry)
    config = config_changes(old["config"], new["config"])
    items_old, items_new = _items(old), _items(new)
    shown_old = {k for k, applicable in items_old.items() if applicable}
    shown_new = {k for k, applicable in items_new.items() if applicable}
    code_old, code_new = old["code"], new["code"]
    not_recorded = [m["version"] for m in (old, new) if not m["code"]["recorded"]]
    if not_recorded:
        modules = {"changed": [], "added": [], "removed": []}
    else:
        modules = changed_modules(code_old["modules"], code_new["modules"])
    commands_old, commands_new = code_old["commands"], code_new["commands"]
    return {
        "before": old["version"],
        "after": new["version"],
        "studies_only_before": sorted(studies_old - studies_new),
        "studies_only_after": sorted(studies_new - studies_old),
        "verdicts": verdicts,
        "causes": {sid: causes(old, new, sid, config, known) for sid in sorted({v["study"] for v in verdicts})},
        "items_added": [f"{sid} {item}" for sid, item in sorted(shown_new - shown_old)],
        "items_removed": [f"{sid} {item}" for sid, item in sorted(shown_old - shown_new)],
        "tables_moved": moved,
        "timings_moved": timing_moved,
        "tables_added": sorted(tables_new.keys() - tables_old.keys()),
        "tables_removed": sorted(tables_old.keys() - tables_new.keys()),
        "code": {
            "commit": [code_old["label"], code_new["label"]],
            "modules": modules,
            "commands": sorted(c for c in commands_old.keys() & commands_new.keys() if commands_old[c] != commands_new[c]),
            "not_recorded": not_recorded,
        },
        "config": config,
    }


# ------------------------------------------------------------------------------------------------ rendering


def _number(value) -> str:
    return "none" if value is None else f"{value:.6g}"


def _state(verdict: str | None) -> str:
    return "absent" if verdict is None else verdict


def _setting(change: Mapping, side: str) -> str:
    return repr(change[side]) if side in change else "absent"


def _claim_line(v: Mapping) -> str:
    text = f"{v['study']} {v['claim']}: "
    text += f"{_state(v['before'])} → {_state(v['after'])}" if v["before"] != v["after"] else f"{_state(v['after'])} (verdict unchanged)"
    quoted = lambda value: f"“{value}”" if value else "none"  # noqa: E731
    if "distance" in v:
        text += f"; farthest check {quoted(v['distance'][0])} → {quoted(v['distance'][1])}"
    if "ours" in v:
        text += f"; checks {quoted(v['ours'][0])} → {quoted(v['ours'][1])}"
    if "checks_moved" in v:
        text += f"; checks table moved ({_names(Path(p).name for p in v['checks_moved'])})"
    return text


def cause_line(study: str, cause: Mapping) -> str:
    """What differs in what produced ``study``'s changed claims, in one line."""
    if cause["same"]:
        if cause["code_recorded"]:
            return f"{study}: same code and configuration: the change is run-to-run nondeterminism"
        return f"{study}: same commit ({cause['commit'][1]}) and configuration: the change is run-to-run nondeterminism"
    parts = []
    if cause["config"]:
        parts.append(f"configuration {_names(cause['config'])}")
    if cause["commands"]:
        code = f"code of {_names(cause['commands'])}"
        if cause["modules"]:
            code += f" (modules changed: {_names(cause['modules'])})"
        parts.append(code)
    elif not cause["code_same"]:
        parts.append(f"code {cause['commit'][0]} → {cause['commit'][1]} (which of it differs is not known: a report recorded no code fingerprints)")
    if cause["packages"]:
        parts.append("packages " + ", ".join(f"{p['package']} {p['before']} → {p['after']}" for p in cause["packages"]))
    same = []
    if not cause["config"]:
        same.append("configuration")
    if cause["code_same"]:
        same.append("code")
    return f"{study}: made with other {'; '.join(parts)}" + (f" (same {' and '.join(same)})" if same else "")


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
        claims = [_claim_line(v) for v in changes["verdicts"]]
        claims += [f"why: {cause_line(sid, cause)}" for sid, cause in changes.get("causes", {}).items()]
        sections.append(("Claims whose verdict or checks changed", claims))
    tolerance = f"beyond rtol {RELATIVE_TOLERANCE:g}, atol {ABSOLUTE_TOLERANCE:g}"
    moved = []
    for t in changes["tables_moved"]:
        text = f"{t['table']}: {t['what']}"
        if largest := t.get("largest"):
            at = largest.get("at", f"row {largest['row']}")
            text += f"; largest {largest['column']} at {at}: {_number(largest['before'])} → {_number(largest['after'])}"
        moved.append(text)
    if moved:
        sections.append((f"Tables whose numbers moved ({tolerance})", moved))
    if timings := [f"{t['table']}: {t['what']}" for t in changes.get("timings_moved", [])]:
        sections.append(("Timings that differ (wall times and hardware of the run, not results)", timings))
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
    if unrecorded := code.get("not_recorded"):
        code_lines.append(f"no code fingerprints recorded in {', '.join(unrecorded)}: modules and commands not compared")
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
