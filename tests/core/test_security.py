"""Nothing the pipeline reads is unpickled; config strings cannot run code; the report escapes what it shows.

Hostile config values go through the real workflow (tests/conftest.py runs it in repository copies): every
payload would create a canary file, and the tests check that none appears.
"""

from __future__ import annotations

import html.parser
import io
import json
import re
import shutil
import tokenize
import uuid
from pathlib import Path

import pandas as pd
import pytest
import yaml

from conftest import REPO, TINY, copy_repo, planned_jobs, snakemake
from posym.pipeline import report

PACKAGE = REPO / "workflow" / "posym"
NOTEBOOKS = sorted((REPO / "workflow" / "posym" / "studies").glob("*/notebooks/*.ipynb"))
RULE_FILES = [REPO / "Snakefile", *sorted((REPO / "workflow").rglob("*.smk"))]
UNPICKLING = re.compile(
    r"\bimport\s+(c?pickle|dill|joblib|shelve|marshal)\b|\bfrom\s+(c?pickle|dill|joblib|shelve)\s+import\b"
    r"|\b(c?pickle|dill|joblib|shelve|marshal)\.|torch\.load\s*\(|\bread_pickle\s*\(|allow_pickle\s*=\s*True"
    r"|\b(np|numpy)\.load\s*\("
)


# ------------------------------------------------------------------------------------------ no pickle


def python_code(source: str) -> str:
    """A Python source with its comments and string literals blanked out (docstrings say "unpickled")."""
    lines = [list(line) for line in source.splitlines(keepends=True)]
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in (tokenize.COMMENT, tokenize.STRING):
            (row, col), (end_row, end_col) = token.start, token.end
            for r in range(row, end_row + 1):
                line = lines[r - 1]
                start, stop = (col if r == row else 0), (end_col if r == end_row else len(line))
                line[start:stop] = [c if c == "\n" else " " for c in line[start:stop]]
    return "".join("".join(line) for line in lines)


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return python_code("\n".join(line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))))


def sources():
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, python_code(path.read_text())
    for path in NOTEBOOKS:
        yield path, notebook_code(path)
    for path in RULE_FILES:  # shell commands are strings here: check every character
        yield path, path.read_text()


def test_nothing_the_pipeline_runs_unpickles():
    checked = 0
    for path, code in sources():
        match = UNPICKLING.search(code)
        assert not match, f"{path.relative_to(REPO)} unpickles: {match.group(0)!r}"
        checked += 1
    assert checked >= 20 and len(NOTEBOOKS) >= 5


def test_local_llm_weights_are_loaded_from_safetensors_only(tmp_path, monkeypatch):
    """A model directory with pickled weights (pytorch_model.bin) is refused before anything is unpickled."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models

    from posym.lm.local import LocalModelError, load_local_model

    vocab = {"[UNK]": 0, "</s>": 1, "a": 2, "b": 3}
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="[UNK]")), unk_token="[UNK]", eos_token="</s>"
    )
    config = transformers.LlamaConfig(
        vocab_size=len(vocab), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, bos_token_id=None, eos_token_id=1, pad_token_id=None,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config)
    tokenizer.save_pretrained(tmp_path)
    config.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / "pytorch_model.bin")  # a pickle, as old checkpoints ship them

    def no_unpickling(*args, **kwargs):
        raise AssertionError("torch.load was called: pickled weights were read")

    monkeypatch.setattr(torch, "load", no_unpickling)
    with pytest.raises(LocalModelError, match="safetensors"):
        load_local_model(tmp_path, device="cpu")


# ------------------------------------------------------------------------------------------ hostile config values


class Canaries:
    """File paths that a payload creates if it ever runs, relative (the job's folder) and absolute."""

    def __init__(self, workdir: Path, folder: Path):
        self.tag = uuid.uuid4().hex[:8]
        self.workdir, self.folder = workdir, folder
        folder.mkdir(exist_ok=True)

    def relative(self, n: int) -> str:
        return f"PWNED{n}-{self.tag}"

    def absolute(self, n: int) -> str:
        return str(self.folder / self.relative(n))

    def fired(self) -> list[str]:
        places = [self.workdir, self.folder, Path.cwd(), REPO, Path.home(), Path("/tmp")]
        found = [str(p) for place in places for p in place.glob(f"PWNED*-{self.tag}")]
        return found + [str(p) for p in self.workdir.rglob(f"*{self.tag}*")]


def config_file(tmp_path: Path, values: dict) -> Path:
    path = tmp_path / f"hostile-{uuid.uuid4().hex[:6]}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def test_a_hostile_report_title_is_neither_run_nor_rendered_as_html(tiny_run, tmp_path):
    workdir = tmp_path / "run"
    shutil.copytree(tiny_run, workdir, symlinks=True)  # the shared run stays as it is
    canaries = Canaries(workdir, tmp_path / "canaries")
    # relative canaries (the schema allows 200 characters): a job runs in the working directory
    title = (
        f'$(touch {canaries.relative(1)})"; touch {canaries.relative(2)}; echo "`touch {canaries.relative(3)}`'
        "</title><script>alert(1)</script><img src=x onerror=alert(2)>"
    )
    hostile = config_file(tmp_path, {"report": {"title": title}})
    # The copy sits in another folder, so its notebooks' absolute paths changed: leave out the "input" trigger,
    # which would rerun every notebook (the title reaches no notebook).
    triggers = ("--rerun-triggers", "mtime", "params", "code", "software-env")
    dry = snakemake(workdir, "-n", "-p", *triggers, configfiles=(TINY, hostile))
    assert planned_jobs(dry) == {"report": 1, "all": 1}
    snakemake(workdir, *triggers, configfiles=(TINY, hostile))
    assert canaries.fired() == []

    new = [p for p in (workdir / "reports").iterdir() if not (tiny_run / "reports" / p.name).exists()]
    (version,) = new
    page = (version / "index.html").read_text()
    assert f"<title>{report._esc(title)}</title>" in page
    assert f"<h1>{report._esc(title)}</h1>" in page
    assert_no_markup_from(title, page)
    manifest = json.loads((version / "manifest.json").read_text())
    assert manifest["config"]["report"]["title"] == title  # kept verbatim where it is data


def test_a_hostile_llm_model_path_fails_as_a_missing_directory_without_running(tmp_path):
    workdir = copy_repo(tmp_path / "repo")
    canaries = Canaries(workdir, tmp_path / "canaries")
    model = f"`touch {canaries.absolute(1)}`$(touch {canaries.absolute(2)}); touch {canaries.relative(3)}"
    hostile = config_file(tmp_path, {"a": {"llm": {"model": model}}})
    for args in (("-n", "-p"), ("results/a/llm/items.csv",)):
        result = snakemake(workdir, *args, configfiles=(TINY, hostile), check=False)
        text = result.stdout + result.stderr
        assert result.returncode != 0
        assert "Missing input files for rule a_llm_probe" in text and model in text, text[-2000:]
    assert canaries.fired() == []
    assert not (workdir / "results").exists()  # stopped before any job ran


def test_a_hostile_endpoint_model_reaches_the_probe_as_one_argument(tmp_path):
    workdir = copy_repo(tmp_path / "repo")
    canaries = Canaries(workdir, tmp_path / "canaries")
    name = f"`touch {canaries.absolute(1)}`$(touch {canaries.absolute(2)}); touch {canaries.relative(3)} #"
    hostile = config_file(tmp_path, {"a": {"llm": {"endpoint_model": name, "url_env": "POSYM_TEST_NO_SUCH_URL"}}})
    result = snakemake(workdir, "-p", "results/a/llm/items.csv", configfiles=(TINY, hostile), check=False)
    # The job ran its shell command with the name quoted, and the probe refused to go on without a URL.
    assert result.returncode != 0
    log = (workdir / "logs/a/llm/endpoint.log").read_text()
    assert "POSYM_TEST_NO_SUCH_URL" in log, log
    assert canaries.fired() == []


def test_papermill_parameters_stay_data(tmp_path):
    """Notebook parameters (posym notebook --parameters JSON) become Python literals, never code."""
    from papermill.translators import PythonTranslator

    canary = tmp_path / "PWNED"
    values = [
        f'"; open({str(canary)!r}, "w"); "',
        f"'''\nopen({str(canary)!r}, 'w')\n'''",
        f'\\"; open({str(canary)!r}, "w") #',
        f"{{open({str(canary)!r}, 'w')}}",
    ]
    namespace: dict = {}
    exec(PythonTranslator.codify({"value": values, "nested": {"k": values[0]}}), namespace)  # noqa: S102
    assert namespace["value"] == values and namespace["nested"] == {"k": values[0]}
    assert not canary.exists()


# ------------------------------------------------------------------------------------------ report escaping


class _Markup(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[tuple[str, list]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, attrs))


def parse(page: str) -> list[tuple[str, list]]:
    parser = _Markup()
    parser.feed(page)
    return parser.tags


def assert_no_markup_from(hostile: str, page: str) -> None:
    assert "<script" not in page.lower()
    tags = parse(page)
    assert not [t for t, _ in tags if t in ("script", "iframe", "object", "embed")]
    assert not [(t, a) for t, a in tags for name, _ in a if name.startswith("on")], "event handler attributes"


HOSTILE = '"><script>alert(1)</script><img src=x onerror=alert(2)>&amp;'


def test_every_string_in_the_report_is_escaped(tmp_path):
    """Config, the study's table, data, captions and file names all reach index.html escaped."""
    figure = tmp_path / "fig2a_accuracy.png"
    figure.write_bytes(b"\x89PNG\r\n")
    table = tmp_path / "fig2a_crossings.csv"
    pd.DataFrame({"task": [HOSTILE], HOSTILE: [1.0]}).to_csv(table, index=False)
    claims = tmp_path / "claims_A1.csv"
    pd.DataFrame(
        [{"claim": "A-1", "task": HOSTILE, "check": HOSTILE, "seed": "0", "measured": HOSTILE, "expected": HOSTILE, "verdict": "pass"}]
    ).to_csv(claims, index=False)
    notebook = tmp_path / "training.ipynb"
    notebook.write_text("{}")
    caption = tmp_path / "caption.rst"
    caption.write_text(HOSTILE)

    def output(kind, path):
        files = {"png": str(path), "svg": str(path)} if kind == "figure" else {"csv": str(path), "md": str(path)}
        return {"kind": kind, "name": path.stem, "files": files, "caption": str(caption)}

    row = {"applicable": True, "reason": "", "paper": True, "category": HOSTILE, "claim": HOSTILE, "notebook": "training"}
    plan = [
        {
            "id": "a",
            "name": HOSTILE,
            "title": HOSTILE,
            "source": HOSTILE,
            "items": [
                {**row, "id": HOSTILE, "key": "k", "title": HOSTILE, "outputs": [output("figure", figure), output("table", table)]},
                {**row, "applicable": False, "reason": HOSTILE, "id": "x", "key": "x", "title": HOSTILE, "outputs": []},
            ],
            "claims": [{"id": "A-1", "statement": HOSTILE, "paper": HOSTILE, "applicable": True, "reason": "", "notebook": "training", "outputs": [output("table", claims)]}],
            "notebooks": [str(notebook)],
        }
    ]
    # The version is made from the code and the configuration (report_version), never from text a user passes.
    _, page_path = report.build(
        tmp_path / "reports",
        config={"studies": [], "report": {"title": HOSTILE}},
        plan=plan,
        repo=tmp_path,  # not a git repository: commit unknown
        history=tmp_path / "results" / "reports",
    )
    page = page_path.read_text()
    assert_no_markup_from(HOSTILE, page)
    escaped = report._esc(HOSTILE)
    assert page.count(escaped) >= 7  # title, h1, study, item, reason, claim, captions
    assert HOSTILE not in page
