"""Tasks: what the core needs to know about a task, and the registry of every study's tasks.

A task is one module of a study, ``posym/studies/<study>/tasks/<name>.py``, defining ``TASK``, an
instance of a :class:`Task` subclass: its vocabulary, its generator, its answer checker, how its
accuracy is broken down, and the example inputs the study's figures draw. The core (datasets on disk,
training, evaluation) reaches tasks only through this interface and :func:`get`, so a new task is one
file. Samples travel as :class:`TaskData`: token ids, the label id, and the per-sample arrays the task
declares (paper A: the hop count and the answer's position).
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np

from posym.registry import STUDIES_DIR

PAD = "<pad>"


@dataclass(frozen=True)
class Vocab:
    """Token strings indexed by id; id 0 is padding."""

    tokens: tuple[str, ...]

    def __post_init__(self):
        if len(set(self.tokens)) != len(self.tokens):
            raise ValueError("vocabulary tokens must be distinct")

    @functools.cached_property
    def _ids(self) -> dict[str, int]:
        return {token: i for i, token in enumerate(self.tokens)}

    def index(self, token: str) -> int:
        try:
            return self._ids[token]
        except KeyError:
            raise KeyError(f"token {token!r} is not in the vocabulary") from None

    def decode(self, ids) -> list[str]:
        """Token strings of a sequence of ids."""
        return [self.tokens[int(i)] for i in np.asarray(ids).reshape(-1)]

    def __len__(self) -> int:
        return len(self.tokens)


@dataclass(frozen=True, eq=False)
class TaskData:
    """A set of samples of one task.

    tokens  (N, L)  input ids, the position the model answers at last
    labels  (N,)    id of the answer token
    arrays          further per-sample arrays the task declares (:attr:`Task.arrays`), readable as
                    attributes: ``data.hops``
    """

    task: str
    tokens: np.ndarray
    labels: np.ndarray
    arrays: Mapping[str, np.ndarray] = field(default_factory=dict)

    def __post_init__(self):
        expected = get(self.task).dtypes
        given = {"tokens": self.tokens, "labels": self.labels, **self.arrays}
        if set(given) != set(expected):
            raise ValueError(f"{self.task} samples need the arrays {sorted(expected)}, got {sorted(given)}")
        if self.tokens.ndim != 2:
            raise ValueError(f"tokens must be 2-D, got shape {self.tokens.shape}")
        for name, array in given.items():
            if array.dtype != expected[name]:
                raise ValueError(f"{name} must be {np.dtype(expected[name])}, got {array.dtype}")
            if len(array) != len(self.tokens) or (name != "tokens" and array.ndim != 1):
                raise ValueError(f"{name} has shape {array.shape}; expected {len(self.tokens)} rows")

    def __getattr__(self, name: str) -> np.ndarray:
        arrays = self.__dict__.get("arrays", {})
        if name in arrays:
            return arrays[name]
        raise AttributeError(f"{type(self).__name__} of task {self.__dict__.get('task')!r} has no array {name!r}")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1]

    def select(self, rows) -> "TaskData":
        """The samples at ``rows`` (indices, a slice or a boolean mask)."""
        pick = lambda array: np.ascontiguousarray(array[rows])  # noqa: E731
        return TaskData(self.task, pick(self.tokens), pick(self.labels), {k: pick(v) for k, v in self.arrays.items()})

    @classmethod
    def concatenate(cls, parts: list["TaskData"]) -> "TaskData":
        """The samples of ``parts`` (of one task) in order."""
        if len({p.task for p in parts}) != 1:
            raise ValueError(f"cannot concatenate samples of different tasks: {sorted({p.task for p in parts})}")
        joined = {name: np.concatenate([p.all_arrays()[name] for p in parts]) for name in parts[0].all_arrays()}
        tokens, labels = joined.pop("tokens"), joined.pop("labels")
        return cls(parts[0].task, tokens, labels, joined)

    def all_arrays(self) -> dict[str, np.ndarray]:
        """Every array by name, in the task's order (tokens, labels, then the task's own)."""
        return {"tokens": self.tokens, "labels": self.labels, **self.arrays}


class Task:
    """What a task tells the core. Subclasses set the class attributes and implement the methods."""

    name: str
    #: The study the task belongs to (set by the registry from the module's location).
    study: str = ""
    #: dtypes of tokens, labels and the task's own per-sample arrays, in storage order.
    dtypes: Mapping[str, np.dtype]

    @functools.cached_property
    def vocabulary(self) -> Vocab:
        return self.build_vocabulary()

    def build_vocabulary(self) -> Vocab:
        raise NotImplementedError

    @property
    def arrays(self) -> tuple[str, ...]:
        """Names of the per-sample arrays beside tokens and labels."""
        return tuple(name for name in self.dtypes if name not in ("tokens", "labels"))

    #: Label ignored by the loss and the accuracy (paper B's count 0), or None.
    ignored_label: int | None = None

    def generate(self, split: str, n: int, base_seed: int, options: Mapping = {}) -> tuple[TaskData, dict]:
        """``n`` samples of ``split`` from dataset seed ``base_seed``, and what to record about how they were made.

        ``options`` are the generator settings of the task's subsection of its study's ``data`` section (sizes
        excluded), e.g. paper B's ``exclude_trigger_fillers``.
        """
        raise NotImplementedError

    def head(self, split: str, size: int, base_seed: int, n: int, options: Mapping = {}) -> TaskData:
        """The first ``n`` samples of the split of ``size`` samples (a task that can make samples alone overrides this)."""
        return self.generate(split, size, base_seed, options)[0].select(slice(0, n))

    def label_text(self, label: int) -> str:
        """How a label reads: the answer token (labels are token ids unless a task says otherwise)."""
        return self.vocabulary.tokens[int(label)]

    def validate(self, data: TaskData) -> None:
        """The answer checker: raise ``ValueError`` naming the first sample whose label is not its answer."""
        raise NotImplementedError

    def accuracy_rows(self, predictions: np.ndarray, data: TaskData) -> list[dict]:
        """Accuracy of predicted label ids, broken down as the task's figures want; the last row is overall.
        Samples of the ignored label do not count."""
        labels = np.asarray(data.labels)
        counted = labels != self.ignored_label if self.ignored_label is not None else np.ones(len(labels), bool)
        correct = (np.asarray(predictions) == labels)[counted]
        return [{"accuracy": float(correct.mean()) if correct.size else float("nan"), "n": int(correct.size)}]


@functools.cache
def registry() -> dict[str, Task]:
    """Every study's tasks by name: the ``TASK`` of each module under ``posym/studies/<study>/tasks/``."""
    found: dict[str, Task] = {}
    for study in sorted(p.name for p in STUDIES_DIR.iterdir() if (p / "tasks" / "__init__.py").is_file()):
        package = f"posym.studies.{study}.tasks"
        for module in pkgutil.iter_modules([str(STUDIES_DIR / study / "tasks")]):
            task = getattr(importlib.import_module(f"{package}.{module.name}"), "TASK", None)
            if task is None:
                continue
            if task.name in found:
                raise ValueError(f"task {task.name!r} is defined by two studies ({found[task.name].study}, {study})")
            task.study = study
            found[task.name] = task
    return found


def get(name: str, study: str | None = None) -> Task:
    """The task ``name``; with ``study``, refused unless it is that study's."""
    try:
        task = registry()[name]
    except KeyError:
        raise ValueError(f"unknown task {name!r}; expected one of {sorted(registry())}") from None
    if study is not None and task.study != study:
        raise ValueError(f"{name!r} is not a task of paper {study.upper()} (it is study {task.study}'s)")
    return task


def names() -> tuple[str, ...]:
    return tuple(registry())
