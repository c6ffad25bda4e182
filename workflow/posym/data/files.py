"""Atomic writes, content hashes and safe tensor files.

Every file posym writes goes through here, so that an interrupted job never leaves a
half-written output behind and a damaged input is refused with the file's name.
Tensors are stored as safetensors only: nothing posym reads is ever unpickled.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file


class IntegrityError(RuntimeError):
    """A file is missing, truncated, corrupt or does not match its recorded hash."""

    def __init__(self, path: os.PathLike | str, reason: str):
        self.path = Path(path)
        super().__init__(f"{self.path}: {reason}")


def sha256_file(path: os.PathLike | str, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while block := handle.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def verify_checksums(directory: Path, names: Iterable[str] | None = None) -> dict[str, str]:
    """Check files of ``directory`` against its ``checksums.json`` (the listed ``names``, or every file it lists)
    and return the checksums; raise IntegrityError naming the first bad file."""
    checksums = read_json(directory / "checksums.json")
    for name in checksums if names is None else names:
        path = directory / name
        if name not in checksums:
            raise IntegrityError(path, "not listed in checksums.json")
        if not path.is_file():
            raise IntegrityError(path, "missing")
        if sha256_file(path) != checksums[name]:
            raise IntegrityError(path, "sha256 does not match checksums.json (truncated or altered)")
    return checksums


def process_umask() -> int:
    """The process's umask (reading it means setting it, so it is set back at once): the permissions plain file
    creation would give, for files made by calls that choose their own."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def tensor_names(path: os.PathLike | str) -> set[str]:
    """The names of the tensors in a safetensors file, from its header alone."""
    path = Path(path)
    try:
        with safe_open(str(path), framework="pt") as handle:
            return set(handle.keys())
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise IntegrityError(path, f"not a readable safetensors file ({err})") from err


@contextlib.contextmanager
def atomic_path(path: os.PathLike | str) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path`` in one rename."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as handle:
            os.fsync(handle.fileno())
        os.chmod(tmp_path, 0o666 & ~process_umask())  # mkstemp's 0600 would hide results from colleagues
        os.replace(tmp_path, target)
    finally:
        tmp_path.unlink(missing_ok=True)


def write_text(path: os.PathLike | str, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: os.PathLike | str, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_bytes(json_bytes(obj))


def json_bytes(obj: Any) -> bytes:
    """The bytes :func:`write_json` writes: sorted keys, so that equal content is equal bytes."""
    return (json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n").encode("utf-8")


def _json_default(obj: Any) -> Any:
    if isinstance(obj, (np.integer,)):
        return int(obj)
    if isinstance(obj, (np.floating,)):
        return float(obj)
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def read_json(path: os.PathLike | str) -> Any:
    path = Path(path)
    if not path.is_file():
        raise IntegrityError(path, "missing")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise IntegrityError(path, f"not valid JSON ({err})") from err


def write_csv(path: os.PathLike | str, frame) -> None:
    """Write a pandas DataFrame atomically."""
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False)


def save_tensors(path: os.PathLike | str, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> str:
    """Write a safetensors file atomically and return its sha256.

    At most one metadata key: safetensors writes several in varying order, which would make
    identical content hash differently.
    """
    if metadata and len(metadata) > 1:
        raise ValueError("save_tensors takes at most one metadata key (safetensors orders several at random)")
    with atomic_path(path) as tmp:
        save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)
        digest = sha256_file(tmp)
    return digest


def host_tensors(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Contiguous CPU tensors of ``tensors``. A GPU tensor's copy is queued without waiting (into pinned memory, which
    ``non_blocking`` chooses) and each GPU is waited for once, not once per tensor."""
    host = {name: t.detach().to("cpu", non_blocking=t.is_cuda) for name, t in tensors.items()}
    for device in {t.device for t in tensors.values() if t.is_cuda}:
        torch.cuda.synchronize(device)
    return {name: t.contiguous() for name, t in host.items()}


#: safetensors' names of the dtypes it stores, in the order it sorts tensors by (descending, then by name).
_SAFETENSORS_DTYPES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.uint16: "U16",
    torch.float16: "F16", torch.bfloat16: "BF16", torch.int32: "I32", torch.uint32: "U32", torch.float32: "F32",
    torch.float64: "F64", torch.int64: "I64", torch.uint64: "U64",
}  # fmt: skip
_SAFETENSORS_RANK = {dtype: rank for rank, dtype in enumerate(_SAFETENSORS_DTYPES)}


def safetensors_chunks(tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> list[bytes | memoryview]:
    """The bytes safetensors would write for ``tensors`` (header, then each tensor's data, little-endian as on the
    hosts posym runs on), as views of the tensors' host memory: written and hashed piece by piece, the file is never
    held in memory whole (``safetensors.torch.save`` copies it twice), nor read back."""
    host = host_tensors(tensors)
    names = sorted(host, key=lambda name: (-_SAFETENSORS_RANK[host[name].dtype], name))
    header: dict[str, Any] = {} if metadata is None else {"__metadata__": metadata}
    offset = 0
    for name in names:
        size = host[name].numel() * host[name].element_size()
        header[name] = {"dtype": _SAFETENSORS_DTYPES[host[name].dtype], "shape": list(host[name].shape), "data_offsets": [offset, offset + size]}
        offset += size
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * (-len(text) % 8)  # the format aligns the data to 8 bytes
    return [len(text).to_bytes(8, "little") + text] + [host[name].reshape(-1).view(torch.uint8).numpy().data for name in names]


def write_synced(path: os.PathLike | str, *chunks: bytes | memoryview) -> str:
    """Write ``chunks`` to the new file ``path`` and flush it to disk; the sha256 of what was written, hashed as it
    is written. For the files of :func:`atomic_directory`, whose rename publishes them."""
    digest = hashlib.sha256()
    with open(path, "xb") as handle:
        for chunk in chunks:
            digest.update(chunk)
            handle.write(chunk)
        handle.flush()
        os.fsync(handle.fileno())
    return digest.hexdigest()


def load_tensors(path: os.PathLike | str, sha256: str | None = None) -> dict[str, torch.Tensor]:
    """Read a safetensors file, refusing a missing, damaged or (when ``sha256`` is given) altered one."""
    path = Path(path)
    if not path.is_file():
        raise IntegrityError(path, "missing")
    if sha256 is not None:
        actual = sha256_file(path)
        if actual != sha256:
            raise IntegrityError(path, f"sha256 {actual[:12]}… does not match the recorded {sha256[:12]}…")
    try:
        return load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise IntegrityError(path, f"not a readable safetensors file ({err})") from err


@contextlib.contextmanager
def atomic_directory(path: os.PathLike | str) -> Iterator[Path]:
    """Yield a fresh temporary directory that becomes ``path`` in one rename when the block succeeds.

    An existing ``path`` is replaced. Readers therefore see either the old directory or the
    complete new one, never a partial one. The files written inside must be on disk before the block ends
    (:func:`write_synced`); the parent directory is synced after the rename, so that the new directory outlasts a
    crash before the caller goes on (say, to delete what it supersedes).
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        os.chmod(tmp, 0o777 & ~process_umask())
        if target.exists():
            trash = target.with_name(f".{target.name}.old")
            shutil.rmtree(trash, ignore_errors=True)
            os.replace(target, trash)
            os.replace(tmp, target)
            shutil.rmtree(trash, ignore_errors=True)
        else:
            os.replace(tmp, target)
        fsync_directory(target.parent)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def fsync_directory(path: os.PathLike | str) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
