"""What paper B's two tasks share (spec §B2): the word vocabulary, padding, the random streams, the checks.

Vocabulary. The authors' tokenizer was trained on a corpus that is not published; their models use
``vocab_size=574``. Following the spec's proposal, the vocabulary is 5 specials then 569 synthetic words
``w000``..``w568``: 574 ids, id 0 padding (:data:`posym.data.tasks.PAD` where the authors have ``[UNK]``, since
posym's core wants id 0 to be padding; the authors pad with id 0 too, so the models see the same thing).

Sequences are sentences of at most :data:`MAX_SENTENCE` = 120 words, right-padded with id 0 to
:data:`MAX_LEN` = 128 (the authors' ``max_len``), as the authors' dataset class does. The option ``length``
shrinks a task for small runs: every size of the task (sentence, segments, counts) scales by length / 128
(:class:`Shape`), so 128 is the authors' task and the tokens' width always says which shape made them.

Labels are class numbers (a distance, a count), not token ids.

Streams. Samples are made in chunks of :data:`CHUNK` samples; chunk ``c`` of split ``s`` draws from
``np.random.default_rng([base_seed, task index, split index, c])``. Each split thus has streams of its own,
the same ``(split, n, base_seed, options)`` gives the same bytes, and the first ``m`` samples of a split of
``n`` are those of a split of ``m`` (every chunk is made whole and the last one cut), so a split's head can be
made alone and growing a split keeps its samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from posym.data.tasks import PAD, Task, TaskData, Vocab

SPECIALS = (PAD, "[UNK]", "[CLS]", "[SEP]", "[MASK]")
N_WORDS = 569
WORDS = tuple(f"w{k:03d}" for k in range(N_WORDS))
FIRST_WORD_ID = len(SPECIALS)  # 5: word w<k> has id 5 + k
VOCAB_SIZE = len(SPECIALS) + N_WORDS  # 574, the authors' vocab_size
MAX_LEN = 128  # padded length (the authors' max_len)
MAX_SENTENCE = 120  # words per sentence at most (the generators' max_sentence_length)
MIN_LENGTH = 16  # the shortest task the option ``length`` makes
SPLITS = ("train", "val", "test")
CHUNK = 4096  # samples per random stream; fixed, since the bytes depend on it

VOCABULARY = Vocab((*SPECIALS, *WORDS))
WORD_IDS = np.arange(FIRST_WORD_ID, VOCAB_SIZE)  # ids of w000..w568


def word_ids(words) -> np.ndarray:
    """Token ids of words (``w000``..``w568``)."""
    return np.array([VOCABULARY.index(word) for word in words], dtype=np.int64)


def stream(base_seed: int, task_index: int, split: str, chunk: int) -> np.random.Generator:
    """The generator of chunk ``chunk`` of ``split`` (module docstring)."""
    return np.random.default_rng([base_seed, task_index, SPLITS.index(split), chunk])


def ordered_samples(draw: np.random.Generator, population: np.ndarray, rows: int, k: int) -> np.ndarray:
    """``rows`` independent ordered samples of ``k`` distinct items of ``population`` (``random.sample`` per row).

    Place by place, every row draws an item uniformly and draws again while it already holds it: each place is
    then uniform over the items not yet taken, which is the law of an ordered sample without replacement. Any
    prefix of a row is thus itself such a sample, which is how segments shorter than ``k`` are made. (Sorting
    one random key per item gives the same law but is 4x slower at 569 items.)
    """
    n_items = len(population)
    picks = np.empty((rows, k), dtype=np.int64)
    taken = np.zeros((rows, n_items), dtype=bool)
    every_row = np.arange(rows)
    for place in range(k):
        pending = every_row
        while pending.size:
            item = draw.integers(0, n_items, pending.size)
            fresh = ~taken[pending, item]
            done, item = pending[fresh], item[fresh]
            picks[done, place] = item
            taken[done, item] = True
            pending = pending[~fresh]
    return population[picks]


@dataclass(frozen=True)
class Shape:
    """The sizes of a task padded to ``length`` positions: the authors' sizes at 128, scaled by length / 128."""

    length: int = MAX_LEN

    def __post_init__(self):
        if not MIN_LENGTH <= self.length <= MAX_LEN:
            raise ValueError(f"length must be {MIN_LENGTH}..{MAX_LEN}, got {self.length!r}")

    def scaled(self, size: int) -> int:
        """``size`` of the authors' task (at 128) in this one."""
        return max(1, round(size * self.length / MAX_LEN))

    @property
    def sentence(self) -> int:
        return self.scaled(MAX_SENTENCE)


def word_mask(lengths: np.ndarray, width: int = MAX_LEN) -> np.ndarray:
    """Where right-padded rows hold words: the first ``lengths[i]`` positions of row ``i``, padding after."""
    return np.arange(width)[None, :] < np.asarray(lengths)[:, None]


def raise_first(name: str, checks: list[tuple[np.ndarray, str]]) -> None:
    """Raise ``ValueError`` naming the first sample that fails any check (mask of bad samples, reason)."""
    bad = np.zeros(len(checks[0][0]), dtype=bool)
    for mask, _ in checks:
        bad |= mask
    if not bad.any():
        return
    first = int(np.flatnonzero(bad)[0])
    reason = next(reason for mask, reason in checks if mask[first])
    raise ValueError(f"{name} sample {first}: {reason} ({int(bad.sum())} bad samples)")


def sentence_lengths(tokens: np.ndarray) -> np.ndarray:
    """Where each row's first padding id is (its width if it has none): the sentence's length if it is well made."""
    padding = tokens == 0
    return np.where(padding.any(axis=1), padding.argmax(axis=1), tokens.shape[1])


def layout_checks(tokens: np.ndarray, lengths: np.ndarray) -> list[tuple[np.ndarray, str]]:
    """Checks every task's tokens pass, given each sentence's expected length: words up to it, padding after."""
    holds_word = word_mask(lengths, tokens.shape[1])
    is_word = (tokens >= FIRST_WORD_ID) & (tokens < VOCAB_SIZE)
    return [
        ((holds_word & ~is_word).any(axis=1), "a sentence position holds padding, a special or an id ≥ 574"),
        ((~holds_word & (tokens != 0)).any(axis=1), "the padding after the sentence is not all id 0"),
    ]


class WordTask(Task):
    """A paper-B task: word sentences padded to 128, a class-number label, chunked streams (module docstring).

    Subclasses set ``name``, ``index`` (in the paper's order: the stream key), ``triggers``, ``dtypes``, and
    implement :meth:`settings`, :meth:`make_chunk` and ``validate``.
    """

    index: int
    #: The task's trigger words: fixed words of the task, so the answer checker can recompute every label.
    triggers: tuple[str, ...]

    def build_vocabulary(self) -> Vocab:
        return VOCABULARY

    @property
    def trigger_ids(self) -> np.ndarray:
        return word_ids(self.triggers)

    def label_text(self, label: int) -> str:
        return str(int(label))

    def settings(self, options: Mapping) -> dict:
        """The generator options this task reads, with their defaults (recorded with the dataset)."""
        length = options.get("length", MAX_LEN)
        if isinstance(length, bool) or not isinstance(length, int):
            raise ValueError(f"length must be an integer, got {length!r}")
        Shape(length)
        return {"length": length}

    def make_chunk(self, draw: np.random.Generator, settings: dict) -> dict[str, np.ndarray]:
        """:data:`CHUNK` samples as arrays (tokens, labels and the task's own), from ``draw``."""
        raise NotImplementedError

    def generate(self, split: str, n: int, base_seed: int, options: Mapping = {}) -> tuple[TaskData, dict]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
        if n < 0:
            raise ValueError(f"n must be ≥ 0, got {n}")
        settings = self.settings(options)
        chunks = [self.make_chunk(stream(base_seed, self.index, split, c), settings) for c in range(-(-n // CHUNK))]
        arrays = {}
        for key, dtype in self.dtypes.items():
            if chunks:
                arrays[key] = np.concatenate([chunk[key] for chunk in chunks])[:n].astype(dtype)
            else:
                arrays[key] = np.zeros((0, settings["length"]) if key == "tokens" else (0,), dtype=dtype)
        data = TaskData(self.name, arrays.pop("tokens"), arrays.pop("labels"), arrays)
        record = {
            "seed": base_seed,
            "stream": [base_seed, self.index, SPLITS.index(split)],
            "triggers": list(self.triggers),
            **settings,
        }
        return data, record

    def head(self, split: str, size: int, base_seed: int, n: int, options: Mapping = {}) -> TaskData:
        """The first ``n`` samples of the split of ``size``: the split of ``n`` samples (module docstring)."""
        if n > size:
            raise ValueError(f"{n} samples asked of a split of {size}")
        return self.generate(split, n, base_seed, options)[0]
