"""What every benchmark does last: write its report as JSON for the report page, and print its summary."""

from __future__ import annotations

import json
from pathlib import Path

from posym.data.files import write_text


def write_report(report: dict, out: Path) -> None:
    """Write ``report`` to ``out`` atomically (a benchmark stopped half-way leaves the last complete JSON) and print
    its ``summary`` lines."""
    write_text(out, json.dumps(report, indent=2, ensure_ascii=False) + "\n")  # in the benchmark's order: the report page shows it so
    for key, value in report["summary"].items():
        print(f"{key}: {value}")
    print(f"written {out}")
