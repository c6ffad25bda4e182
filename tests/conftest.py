"""What several test files share: copies of the repository to run the workflow in, the one tiny pipeline
run of the session, and the local SLURM test cluster.

The workflow runs in a *copy* of the repository (its tracked and untracked, not ignored files, committed in a
fresh git repository) as a user runs it, with the copy as the working directory. Tests may then edit the
copy's notebooks or configuration without touching the real repository, and report versions are
``<commit>-cfg<hash>`` as in a real clone.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from posym.pipeline import config as posym_config

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"
#: The test configurations: each of tests/configs/ over the tiny one (tiny itself alone).
CONFIG_MATRIX = {
    path.stem: (TINY,) if path == TINY else (TINY, path) for path in sorted((REPO / "tests" / "configs").glob("*.yaml"))
}
CLUSTER_SH = REPO / "tests" / "slurm" / "cluster.sh"
SNAKEMAKE_TIMEOUT_S = 900  # the tiny pipeline takes 1-3 min on 2 cores

_GIT = ["git", "-c", "core.hooksPath=/dev/null", "-c", "commit.gpgsign=false"]
_GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "posym tests",
    "GIT_AUTHOR_EMAIL": "tests@posym.invalid",
    "GIT_COMMITTER_NAME": "posym tests",
    "GIT_COMMITTER_EMAIL": "tests@posym.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z",
}


# ------------------------------------------------------------------------------------------ the fast loop


#: Fixtures that run a workflow or a cluster: a test that uses one is slow (it stays out of `pytest -m "not slow"`).
SLOW_FIXTURES = {"tiny_run", "slurm_cluster"}


def pytest_collection_modifyitems(config, items):
    import torch

    no_gpu = pytest.mark.skip(reason="needs a CUDA device (benchmarks/gpu_check.sh runs these on a GPU machine)")
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        if "gpu" in item.keywords and not torch.cuda.is_available():
            item.add_marker(no_gpu)


# ------------------------------------------------------------------------------------------ settings


def model_config(vocab_size: int, **settings):
    """A ModelConfig of paper A's defaults (its schema) with ``settings`` changed."""
    from posym.nn.gptj import ModelConfig

    return ModelConfig(vocab_size=vocab_size, **{**posym_config.study_defaults("a")["model"], **settings})


def train_config(**settings):
    """A TrainConfig of paper A's defaults (its schema) with ``settings`` changed."""
    from posym.training.splits import TrainConfig

    return TrainConfig.from_dict({**posym_config.study_defaults("a")["train"], **settings})


# ------------------------------------------------------------------------------------------ a tiny language model


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny matrices on a shared 2-core machine: a second intra-op thread only contends (some 50x slower for
    paper B's tiny models). Modules opt in with ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build_tokenizer():
    """Word-level tokenizer over paper A's probe prompts' pieces, with digits split off: ``" c2"`` → ``▁c`` + ``2``,
    so Letter candidates take two tokens and Number candidates one (both scoring paths run)."""
    import string

    import transformers
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from posym.studies.a.tasks import PAPER_ORDER, get

    pre = pre_tokenizers.Sequence([pre_tokenizers.Metaspace(), pre_tokenizers.Digits(individual_digits=True)])
    texts = [get(task).render_probe(text.split()) for task in PAPER_ORDER for text, _ in get(task).probe_examples]
    pieces = {piece for text in texts for piece, _ in pre.pre_tokenize_str(text)}
    pieces |= {f"{p}{c}" for p in ("", "▁", '▁"') for c in string.ascii_lowercase + string.digits} | {"▁"}
    core = Tokenizer(
        models.WordLevel({t: i for i, t in enumerate(["[UNK]", "</s>", *sorted(pieces)])}, unk_token="[UNK]")
    )
    core.pre_tokenizer, core.decoder = pre, decoders.Metaspace()
    return transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", eos_token="</s>")


def build_tiny_llm(path: Path, tokenizer=None) -> Path:
    """A randomly initialised 2-layer RoPE language model (Llama) saved with its tokenizer in ``path``."""
    import torch
    import transformers

    tokenizer = tokenizer or build_tokenizer()
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=None, eos_token_id=1, pad_token_id=None,
    )  # fmt: skip
    transformers.LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def llama_cpp_permute(weights, heads: int):
    """llama.cpp's reordering of q/k rows (convert_hf_to_gguf.py), which transformers' GGUF loader undoes.

    Rows only move, so it applies to Q8_0 blocks as to values: a row's blocks stay together."""
    pairs = weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
    return pairs.swapaxes(1, 2).reshape(weights.shape)


def byte_level_tokens() -> list[str]:
    """GPT-2's byte-level alphabet (256 characters, one per byte; "Ġ" is a space) after an end-of-text token: with
    it, a BPE tokenizer encodes any text."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    extra = iter(range(256, 512))
    return ["<|endoftext|>", *(chr(b) if b in printable else chr(next(extra)) for b in range(256))]


def write_tiny_gguf(path: Path, tokens: list[str], merges: list[str], name="tiny-llama", heads=4, kv_heads=2):
    """Write a random 2-layer Llama with tied embeddings as llama.cpp stores it (q/k rows permuted, matrices in
    Q8_0 blocks, a GPT-2 BPE tokenizer of ``tokens`` and ``merges``; token 0 ends a text) and return the reference:
    the same model with the Q8_0 weights dequantised, in the Hugging Face layout."""
    import gguf
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokens), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=heads,
        num_key_value_heads=kv_heads, max_position_embeddings=2048, tie_word_embeddings=True, rms_norm_eps=1e-5,
        bos_token_id=None, eos_token_id=0, pad_token_id=None,
    )  # fmt: skip
    model = transformers.LlamaForCausalLM(config).eval()
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name(name)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(config.hidden_size // heads)
    writer.add_vocab_size(len(tokens))
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([gguf.TokenType.CONTROL] + [gguf.TokenType.NORMAL] * (len(tokens) - 1))
    writer.add_eos_token_id(0)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    reference = {}
    for hf_name, tensor in model.state_dict().items():
        if hf_name == "lm_head.weight":  # tied: a GGUF without output.weight
            continue
        gguf_name, values = names.get_name(hf_name, try_suffixes=(".weight",)), tensor.numpy()
        stored = values
        if values.ndim == 2:
            stored = gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0)
            values = gguf.quants.dequantize(stored, gguf.GGMLQuantizationType.Q8_0)
        if ".attn_q." in gguf_name or ".attn_k." in gguf_name:
            stored = llama_cpp_permute(stored, heads if ".attn_q." in gguf_name else kv_heads)
        writer.add_tensor(gguf_name, stored, raw_dtype=gguf.GGMLQuantizationType.Q8_0 if values.ndim == 2 else None)
        reference[hf_name] = torch.from_numpy(values)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert model.load_state_dict(reference, strict=False).missing_keys == ["lm_head.weight"]  # tied to embed_tokens
    return model


def build_tiny_gguf_llm(path: Path) -> Path:
    """A random tiny Llama as a Q8_0 GGUF file whose byte-level tokenizer encodes any prompt."""
    write_tiny_gguf(path, [*byte_level_tokens(), "Ġt"], ["Ġ t"], name="tiny-gguf")
    return path


# ------------------------------------------------------------------------------------------ repository copies


def repo_files() -> list[str]:
    """The repository's tracked and untracked, not ignored files that exist (the working tree as it is)."""
    listed = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.decode()
    return sorted({name for name in listed.split("\0") if name and (REPO / name).is_file()})


def copy_repo(dest: Path) -> Path:
    """Copy the working tree of the repository to ``dest`` and commit it there; returns ``dest``.

    Modification times are kept (shutil.copy2), so the copy is as up to date as the original. The reports
    committed under reports/ stay behind: a test's run makes its own.
    """
    dest = Path(dest)
    for name in (name for name in repo_files() if not name.startswith("reports/")):
        target = dest / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    env = {**os.environ, **_GIT_IDENTITY}
    for command in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "copy of the working tree"]):
        subprocess.run([*_GIT, "-C", str(dest), *command], check=True, capture_output=True, env=env)
    return dest


def clean_env() -> dict[str, str]:
    """The environment for a snakemake child: without the variables of an enclosing SLURM job."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "SBATCH_", "SRUN_"))}


def snakemake_command(workdir, *args, configfiles=(TINY,), cores=2) -> list[str]:
    """``snakemake ARGS`` in ``workdir`` (a repository copy: its own Snakefile runs there).

    The config files come last: --configfile takes every following word, targets included.
    """
    workdir = Path(workdir)
    command = [sys.executable, "-m", "snakemake", "-s", str(workdir / "Snakefile"), "--directory", str(workdir)]
    if cores is not None:
        command += ["--cores", str(cores)]
    command += list(args)
    if configfiles:
        command += ["--configfile", *map(str, configfiles)]
    return command


def snakemake(workdir, *args, configfiles=(TINY,), check=True, cores=2, timeout=SNAKEMAKE_TIMEOUT_S):
    """Run snakemake in a repository copy; with ``check``, fail the test with its output when it fails."""
    command = snakemake_command(workdir, *args, configfiles=configfiles, cores=cores)
    result = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=clean_env())
    if check and result.returncode != 0:
        raise AssertionError(f"snakemake {' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-5000:]}")
    return result


def run_cancelling_on_timeout(command, timeout) -> str:
    """Run a snakemake command and return its output; on a timeout, interrupt it like Ctrl-C (so that it
    cancels the SLURM jobs it submitted) and fail the test; fail it too when the command fails."""
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=clean_env()) as proc:
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                output, _ = proc.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                output, _ = proc.communicate()
            pytest.fail(f"{' '.join(command)} ran longer than {timeout} s:\n{output[-6000:]}")
    if proc.returncode != 0:
        pytest.fail(f"{' '.join(command)} failed:\n{output[-6000:]}")
    return output


def planned_jobs(result) -> dict[str, int]:
    """Rule -> job count from the 'Job stats' table of a dry run (empty when nothing is to be done)."""
    text = result.stdout + result.stderr
    table = text.split("Job stats:")[1] if "Job stats:" in text else ""
    counts = {}
    for line in table.splitlines():
        if not line.strip():
            if counts:
                break
            continue
        match = re.match(r"^(\w+)\s+(\d+)$", line.strip())
        if match and match.group(1) != "total":
            counts[match.group(1)] = int(match.group(2))
    return counts


def workflow_rules(configfiles, workdir=None):
    """The rules of the workflow Snakemake builds for ``configfiles`` (read through its API: generated rules and
    `use rule` variants included), without running anything."""
    import tempfile

    from snakemake.api import SnakemakeApi
    from snakemake.settings.types import ConfigSettings, OutputSettings, ResourceSettings

    with tempfile.TemporaryDirectory() as scratch, SnakemakeApi(OutputSettings()) as api:
        workflow = api.workflow(
            resource_settings=ResourceSettings(cores=1),
            config_settings=ConfigSettings(configfiles=[Path(p) for p in configfiles]),
            snakefile=REPO / "Snakefile",
            workdir=Path(workdir or scratch),
        )
        return list(workflow._workflow.rules)  # the API has no public list of a workflow's rules


def report_dir(workdir) -> Path:
    """The one report version directory of a run."""
    (version,) = [p for p in (Path(workdir) / "reports").iterdir() if p.is_dir()]
    return version


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> Path:
    """A repository copy in which the whole pipeline ran on tests/configs/tiny.yaml (once per session).

    Shared by test_pipeline.py and test_reruns.py. Tests must leave it as they found it: no new outputs, no
    lasting edits (a test that edits a file restores its bytes and modification time).
    """
    workdir = copy_repo(tmp_path_factory.mktemp("tiny"))
    snakemake(workdir)
    return workdir


# ------------------------------------------------------------------------------------------ discrimination


def assert_untrained_models_decide_nothing(workdir: Path, study_id: str) -> None:
    """A run of the test configurations trains models that learn nothing (chance-level accuracy): on them, every
    claim decided on trained models is "not reproduced" or "not testable at this size" ("not testable here" only
    where the configuration trains none of the models a claim reads: paper B's toy grid has no partial_rope_all
    for B-4), and no check that decides such a claim passes (posym.pipeline.claims.split_checks). A check that
    passes here, on a model that learned nothing, cannot tell a reproduction from noise: it must be marked
    supporting, or gated on the model having learned its task."""
    import json

    import pandas as pd

    from posym.pipeline import claims, study

    manifest = json.loads((report_dir(workdir) / "manifest.json").read_text())
    verdicts = {row["claim"]: row for row in manifest["verdicts"][study_id]}
    tables = [pd.read_csv(path, dtype=str, keep_default_na=False) for path in sorted((Path(workdir) / "results" / study_id / "tables").glob("claims_*.csv"))]
    trained = [c for c in study.load(study_id).claims if c.evidence[0] == "trained"]
    assert trained, f"study {study_id} has no claim decided on trained models"
    for claim in trained:
        deciding, _ = claims.split_checks(tables, {"id": claim.id, "evidence": list(claim.evidence)})
        passing = deciding[deciding["verdict"] == "pass"]
        assert passing.empty, f"{claim.id}: deciding checks pass on a model that learned nothing: {passing[['task', 'check', 'measured']].to_dict('records')}"
        verdict = verdicts[claim.id]["verdict"]
        if verdict == claims.NOT_TESTABLE:
            assert deciding["measured"].str.startswith("not trained: ").all(), (claim.id, deciding["measured"].tolist())
        else:
            assert verdict in (claims.NOT_REPRODUCED, claims.NOT_TESTABLE_AT_SIZE), (claim.id, verdicts[claim.id])


# ------------------------------------------------------------------------------------------ SLURM test cluster


def _cluster(command, timeout=900):
    return subprocess.run([str(CLUSTER_SH), command], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running one-node SLURM test cluster (tests/slurm/cluster.sh); yields its scratch folder.

    Skips unless POSYM_SLURM=1. Uses a cluster that is already up (scripts/test.sh starts one before pytest
    and stops it after) and leaves it running; otherwise runs `cluster.sh up` itself and `cluster.sh down` at
    the end of the session, also when a test fails. `down` stops the daemons by their pid files.
    """
    if os.environ.get("POSYM_SLURM") != "1":
        pytest.skip(
            "needs the local SLURM test cluster: set POSYM_SLURM=1 (pytest then starts and stops it; "
            "it needs root and Debian's slurm packages, see tests/slurm/cluster.sh)"
        )
    started = False
    try:
        if _cluster("status", timeout=60).returncode != 0:
            started = True
            up = _cluster("up")
            if up.returncode != 0:
                pytest.fail(f"`cluster.sh up` failed:\n{up.stdout}\n{up.stderr}")
            status = _cluster("status", timeout=60)
            if status.returncode != 0:
                pytest.fail(f"the SLURM test cluster did not come up:\n{status.stdout}\n{status.stderr}")
        yield Path(os.environ.get("POSYM_SLURM_DIR", "/tmp/posym-slurm")).resolve()
    finally:
        if started:
            down = _cluster("down")
            if down.returncode != 0:
                print(f"`cluster.sh down` failed:\n{down.stdout}\n{down.stderr}", file=sys.stderr)
