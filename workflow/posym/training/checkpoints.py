"""Checkpoint directories: HF-loadable weights plus what is needed to verify and resume.

A checkpoint ``step-NNNNNN/`` holds

* ``model.safetensors``, ``config.json`` — the model's weights and settings (:mod:`posym.nn.architectures`); for
  the core's GPT-J, loadable as is by ``GPTJForCausalLM.from_pretrained``;
* ``vocab.json`` — the token strings, id order;
* ``tokenizer.json``, ``tokenizer_config.json`` — the same vocabulary as a word-level Hugging Face tokenizer
  (whitespace-split, ids equal posym's), so that ``AutoTokenizer.from_pretrained`` and the tools built on it load
  the checkpoint; posym itself reads ``vocab.json`` (checkpoints written before these files lack them);
* ``progress.json`` — evaluation rows and the training log since the previous checkpoint;
* ``checksums.json`` — sha256 of each file above, checked on every load;
* ``trainer_state.safetensors`` + ``trainer_state.json`` — optimizer moments and generator
  state, kept in the newest checkpoint only (they are three times the size of the weights).

Each directory is published with one rename, so a checkpoint is either complete or absent; a write that fails (a full
disk) removes the unfinished directory and stops the job with :class:`CheckpointWriteError`.
"""

from __future__ import annotations

import contextlib
import re
import shutil
from pathlib import Path
from typing import Iterator

import torch

from posym.data.files import IntegrityError, atomic_directory, json_bytes, load_tensors, read_json, safetensors_chunks, verify_checksums, write_json, write_synced
from posym.nn import architectures
from posym.nn.hf import HF_N_POSITIONS
from posym.data.tasks import PAD

STEP_DIR = re.compile(r"^step-(\d{6,})$")
VERIFIED_FILES = ("model.safetensors", "config.json", "vocab.json", "progress.json")
TRAINER_FILES = ("trainer_state.safetensors", "trainer_state.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
#: The unknown-word token of a vocabulary that has one (paper B's); in a vocabulary without it, tokenizing an unknown
#: word is an error ("Missing [UNK] token from the vocabulary"), never a silent id.
UNK = "[UNK]"


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:06d}"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """(step, dir) of the published checkpoints under root, in step order."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := STEP_DIR.match(p.name))]
    return sorted(found)


class CheckpointWriteError(IntegrityError):
    """A checkpoint file could not be written (a full disk, a quota): the job stops, its complete checkpoints stay."""

    def __init__(self, path: Path, err: OSError):
        super().__init__(path, f"could not be written ({err.strerror or err}); rerun the same command to resume from the last complete checkpoint")


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    try:
        yield
    except OSError as err:
        raise CheckpointWriteError(path, err) from err


def write_checkpoint(
    root: Path,
    step: int,
    model,
    member: int,
    vocab: list[str],
    progress: dict,
    trainer_state: tuple[dict[str, torch.Tensor], dict] | None = None,
) -> Path:
    """Publish step-NNNNNN under root for one member of ``model``; returns its path.

    Each file is hashed as it is written and synced once, so nothing is read back; a failed write raises
    :class:`CheckpointWriteError` naming the file, with no step directory left behind."""
    target = step_dir(root, step)
    # atomic_directory sits inside _naming(target): the unfinished directory is gone before the error is raised.
    with _naming(target), atomic_directory(target) as tmp:
        checksums = {}
        for name, chunks in _files(model, member, vocab, progress, trainer_state):
            with _naming(target / name):
                checksums[name] = write_synced(tmp / name, *chunks)
        with _naming(target / "checksums.json"):
            write_synced(tmp / "checksums.json", json_bytes(checksums))
    return target


def _files(model, member: int, vocab: list[str], progress: dict, trainer_state) -> Iterator[tuple[str, list]]:
    """A checkpoint's files but checksums.json, one at a time, so that one file's host copy is held at a time."""
    yield "model.safetensors", safetensors_chunks(model.checkpoint_tensors(member), metadata={"format": "pt"})
    yield "config.json", [json_bytes(model.checkpoint_config())]
    yield "vocab.json", [json_bytes(list(vocab))]
    for name, content in hf_tokenizer_files(vocab).items():
        yield name, [json_bytes(content)]
    yield "progress.json", [json_bytes(progress)]
    if trainer_state is not None:
        tensors, meta = trainer_state
        yield "trainer_state.safetensors", safetensors_chunks(tensors)
        yield "trainer_state.json", [json_bytes(meta)]


def hf_tokenizer_files(vocab: list[str]) -> dict[str, dict]:
    """``tokenizer.json`` (the ``tokenizers`` library's format: a WordLevel model behind a whitespace split, the
    padding token special) and ``tokenizer_config.json`` of a vocabulary; written as JSON so that posym needs no
    tokenizer library. Decoding joins tokens with spaces, as posym's prompts are written."""
    vocab = list(vocab)
    unk = UNK if UNK in vocab else None
    specials = [t for t in (PAD, unk) if t in vocab]
    tokenizer = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": vocab.index(token),
                "content": token,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for token in specials
        ],
        "normalizer": None,
        "pre_tokenizer": {"type": "WhitespaceSplit"},
        "post_processor": None,
        "decoder": None,
        "model": {"type": "WordLevel", "vocab": {token: i for i, token in enumerate(vocab)}, "unk_token": UNK},
    }
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "pad_token": PAD if PAD in vocab else None,
        "unk_token": unk,
        "bos_token": None,
        "eos_token": None,
        "model_max_length": HF_N_POSITIONS,
        "clean_up_tokenization_spaces": False,
    }
    return {"tokenizer.json": tokenizer, "tokenizer_config.json": config}


def drop_trainer_state(directory: Path) -> None:
    """Remove the resume state from an older checkpoint once a newer one carries it.

    The files go before their checksums: a job killed in between leaves a checkpoint without a resume state (and
    checksums naming absent files no load reads), never resume files its checksums do not list."""
    for name in TRAINER_FILES:
        (directory / name).unlink(missing_ok=True)
    checksums_path = directory / "checksums.json"
    checksums = read_json(checksums_path)
    for name in TRAINER_FILES:
        checksums.pop(name, None)
    write_json(checksums_path, checksums)


def verify(directory: Path, names: tuple[str, ...] = VERIFIED_FILES) -> dict[str, str]:
    """Check the listed files against checksums.json; raise IntegrityError naming the bad file."""
    directory = Path(directory)
    if not directory.is_dir():
        raise IntegrityError(directory, "checkpoint directory missing")
    return verify_checksums(directory, names)


def load_model(directory: Path, device: str | torch.device = "cpu"):
    """The single-member model (the architecture its config.json names) and vocabulary of a verified checkpoint."""
    directory = Path(directory)
    verify(directory)
    saved = read_json(directory / "config.json")
    try:
        config = architectures.from_checkpoint(saved["posym"])
    except (KeyError, TypeError, ValueError) as err:
        raise IntegrityError(directory / "config.json", f"no usable posym model settings ({err})") from err
    model = config.build()
    model.load_checkpoint_tensors(load_tensors(directory / "model.safetensors"))
    return model.to(device).eval(), read_json(directory / "vocab.json")


def load_progress(directory: Path) -> dict:
    verify(directory, ("progress.json",))
    return read_json(Path(directory) / "progress.json")


def load_trainer_state(directory: Path) -> tuple[dict[str, torch.Tensor], dict]:
    directory = Path(directory)
    verify(directory, VERIFIED_FILES + TRAINER_FILES)
    return load_tensors(directory / "trainer_state.safetensors"), read_json(directory / "trainer_state.json")


def load_trainer_meta(directory: Path) -> dict:
    """The verified trainer_state.json of a checkpoint (its fingerprint, format, seed), without the tensors."""
    verify(directory, ("trainer_state.json",))
    return read_json(Path(directory) / "trainer_state.json")


def has_trainer_state(directory: Path) -> bool:
    """Whether the checkpoint keeps a resume state: its files present and listed in its checksums (a drop that
    posym before 2026-12-04 interrupted could leave the files unlisted; they are then no state, not a damaged one)."""
    directory = Path(directory)
    if not all((directory / name).is_file() for name in TRAINER_FILES):
        return False
    listed = read_json(directory / "checksums.json")
    return all(name in listed for name in TRAINER_FILES)


def remove_all(root: Path) -> int:
    """Delete every checkpoint under root (a stale run of other settings); returns how many."""
    found = list_checkpoints(root)
    for _, path in found:
        _discard(path)
    return len(found)


def remove_after(root: Path, step: int) -> int:
    """Delete the checkpoints past ``step`` (those of a run that did not finish); how many there were."""
    later = [path for s, path in list_checkpoints(root) if s > step]
    for path in later:
        _discard(path)
    return len(later)


def _discard(directory: Path) -> None:
    """Unpublish a checkpoint with one rename, then delete it: a kill midway leaves a hidden folder, never a
    step directory with part of its files."""
    hidden = directory.with_name(f".discarded-{directory.name}")
    shutil.rmtree(hidden, ignore_errors=True)
    directory.rename(hidden)
    shutil.rmtree(hidden)


def load_index(path: Path) -> dict:
    """Read a training job's checkpoints.json and check every listed checkpoint is intact."""
    path = Path(path)
    index = read_json(path)
    for entry in index["checkpoints"]:
        directory = path.parent / entry["path"]
        checksums = verify(directory)
        if checksums["model.safetensors"] != entry["sha256"]:
            raise IntegrityError(directory / "model.safetensors", "differs from the checkpoint index")
    return index


def final_entry(index: dict) -> dict:
    """The index entry of the checkpoint a run's analyses read: the one its ``final`` names (the last or the best
    on validation, :func:`posym.training.splits.choose_final`); the newest in an index written before there was a choice."""
    step = index.get("final", {}).get("step", index["checkpoints"][-1]["step"])
    return next(entry for entry in index["checkpoints"] if entry["step"] == step)


def load_final_model(index_path: Path):
    """The analysed checkpoint of a training run (:func:`final_entry`; every checkpoint of its checkpoints.json
    checked) with its vocabulary and its index entry."""
    index = load_index(index_path)
    final = final_entry(index)
    model, vocab = load_model(Path(index_path).parent / final["path"])
    return model, vocab, final
