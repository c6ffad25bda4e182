"""Datasets on disk: one safetensors file of arrays plus one JSON file that describes and fingerprints it.

A file pair holds one or more named sets of one task: a split (``train``, one set) or, say, paper A's
length-extended test sets (``extra0``, ``extra10``, ..., one per length). ``<stem>.safetensors`` holds each
set's :class:`posym.data.tasks.TaskData` arrays under ``<set>/<array>`` (tokens, labels and the task's own arrays).
``<stem>.json`` records what made them (task, vocabulary, generator config, posym version), every array's
shape and dtype, and the sha256 of the safetensors file.

Loading checks all of it and, by default, runs the task's answer checker on every sample
(:meth:`posym.data.tasks.Task.validate`), so a damaged, stale or foreign file is refused with its name
(:class:`posym.data.files.IntegrityError`) instead of being trained or evaluated on. Nothing is ever unpickled.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import numpy as np
import torch

from posym.data import tasks
from posym.data.files import IntegrityError, load_tensors, read_json, save_tensors, write_json

FORMAT = "posym-dataset"
FORMAT_VERSION = 1
TENSORS_SUFFIX = ".safetensors"
METADATA_SUFFIX = ".json"


def posym_version() -> str:
    try:
        return importlib.metadata.version("posym")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def split_files(path: os.PathLike | str, name: str | None = None) -> tuple[Path, Path]:
    """(safetensors path, json path) of a dataset given as a stem, either of its files, or a directory + ``name``."""
    path = Path(path)
    if path.is_dir():
        if not name:
            raise ValueError(f"{path} is a directory: a split name is needed")
        path = path / name
    if path.suffix in (TENSORS_SUFFIX, METADATA_SUFFIX):
        path = path.with_suffix("")
    return path.with_name(path.name + TENSORS_SUFFIX), path.with_name(path.name + METADATA_SUFFIX)


# ------------------------------------------------------------------------------------------------ saving


def save_split(path: os.PathLike | str, data: tasks.TaskData, generator_config: dict) -> tuple[Path, Path]:
    """Validate one split and write it as ``<path>.safetensors`` + ``<path>.json``.

    ``path`` is a stem (``results/a/data/number/seed0/train``), either file of the pair, or an existing directory
    (the file name is then ``generator_config["split"]``). The set is named ``generator_config["split"]``, or
    after the file when the config has no split. ``generator_config`` is recorded as given.
    """
    tensors_path, _ = split_files(path, generator_config.get("split"))
    name = generator_config.get("split") or tensors_path.name.removesuffix(TENSORS_SUFFIX)
    return save_splits(tensors_path, {name: data}, generator_config)


def save_splits(path: os.PathLike | str, sets: dict[str, tasks.TaskData], generator_config: dict) -> tuple[Path, Path]:
    """Validate several named sets of one task (e.g. one per length) and write them to one file pair.

    Each file is written atomically, the safetensors file first: a crash between the two leaves a JSON whose
    hash no longer matches, which the loaders refuse.
    """
    if not sets:
        raise ValueError("no sets to save")
    task_names = {data.task for data in sets.values()}
    if len(task_names) != 1:
        raise ValueError(f"all sets must be of one task, got {sorted(task_names)}")
    for name, data in sets.items():
        if not name or "/" in name:
            raise ValueError(f"bad set name {name!r}")
        try:
            tasks.get(data.task).validate(data)
        except ValueError as err:
            raise ValueError(f"set {name!r}: {err}") from err
    (task,) = task_names
    tensors_path, metadata_path = split_files(path, generator_config.get("split"))
    tensors = {
        f"{name}/{key}": torch.from_numpy(np.ascontiguousarray(value))
        for name, data in sets.items()
        for key, value in data.all_arrays().items()
    }
    # No safetensors metadata: with two or more keys its header order varies from call to call (safetensors
    # 0.8 keeps it in a hash map), which would make identical datasets hash differently. The JSON has it all.
    digest = save_tensors(tensors_path, tensors)
    record_of_sets = {
        name: {
            "n_samples": len(data),
            "seq_len": data.seq_len,
            "arrays": {key: {"shape": list(v.shape), "dtype": v.dtype.name} for key, v in data.all_arrays().items()},
        }
        for name, data in sets.items()
    }
    write_json(
        metadata_path,
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "task": task,
            "vocab": list(tasks.get(task).vocabulary.tokens),
            "generator": dict(generator_config),
            "sets": record_of_sets,
            "tensors_file": tensors_path.name,
            "sha256": digest,
            "posym_version": posym_version(),
        },
    )
    return tensors_path, metadata_path


# ----------------------------------------------------------------------------------------------- loading


def load_metadata(path: os.PathLike | str) -> dict:
    """The JSON record of a dataset, checked for its format and required keys."""
    _, metadata_path = split_files(path)
    metadata = read_json(metadata_path)
    required = ("format", "format_version", "task", "vocab", "generator", "sets", "sha256")
    missing = [key for key in required if not isinstance(metadata, dict) or key not in metadata]
    if missing:
        raise IntegrityError(metadata_path, f"not a posym dataset record (missing {', '.join(missing)})")
    if (metadata["format"], metadata["format_version"]) != (FORMAT, FORMAT_VERSION):
        raise IntegrityError(
            metadata_path,
            f"format {metadata['format']} v{metadata['format_version']} is not {FORMAT} v{FORMAT_VERSION}",
        )
    return metadata


def load_splits(path: os.PathLike | str, check_answers: bool = True) -> dict[str, tasks.TaskData]:
    """Every set of a dataset, by name, refusing anything that does not match its record.

    Checks: both files exist; the safetensors file's sha256 equals the recorded one; the vocabulary equals the
    current code's; the arrays, shapes and dtypes are the recorded and expected ones; and, unless
    ``check_answers`` is false, the task's answer checker accepts every sample (about 1 s for a paper A train split).
    """
    tensors_path, metadata_path = split_files(path)
    metadata = load_metadata(metadata_path)
    if metadata["task"] not in tasks.names():
        raise IntegrityError(metadata_path, f"unknown task {metadata['task']!r}")
    task = tasks.get(metadata["task"])
    if metadata["vocab"] != list(task.vocabulary.tokens):
        raise IntegrityError(metadata_path, f"the {task.name} vocabulary differs from the one this code uses")

    tensors = load_tensors(tensors_path, sha256=metadata["sha256"])
    recorded_sets = metadata["sets"]
    expected_keys = {f"{name}/{key}" for name in recorded_sets for key in task.dtypes}
    if set(tensors) != expected_keys:
        raise IntegrityError(
            tensors_path, f"holds arrays {sorted(tensors)}; the record implies {sorted(expected_keys)}"
        )
    sets = {}
    for name, record in recorded_sets.items():
        arrays = {}
        for key in task.dtypes:
            value = tensors[f"{name}/{key}"].numpy()
            recorded = record.get("arrays", {}).get(key, {})
            expected_dtype = np.dtype(task.dtypes[key]).name
            if list(value.shape) != recorded.get("shape") or value.dtype.name != recorded.get("dtype"):
                raise IntegrityError(
                    tensors_path, f"{name}/{key} is {value.dtype.name}{list(value.shape)}; the record says {recorded}"
                )
            if value.dtype.name != expected_dtype:
                raise IntegrityError(
                    tensors_path, f"{name}/{key} is {value.dtype.name}; this code expects {expected_dtype}"
                )
            arrays[key] = value
        try:
            data = tasks.TaskData(task.name, arrays.pop("tokens"), arrays.pop("labels"), arrays)
            if check_answers:
                task.validate(data)
        except ValueError as err:
            raise IntegrityError(tensors_path, f"set {name!r}: content check failed: {err}") from err
        sets[name] = data
    return sets


def load_split(path: os.PathLike | str, check_answers: bool = True) -> tasks.TaskData:
    """The one set of a split written by :func:`save_split` (checked as by :func:`load_splits`)."""
    sets = load_splits(path, check_answers)
    if len(sets) != 1:
        raise ValueError(f"{split_files(path)[0]} holds {len(sets)} sets ({', '.join(sets)}); use load_splits")
    return next(iter(sets.values()))
