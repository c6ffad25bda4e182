"""Paper B's position-sensitive task, "distance" (spec §B2, Task 1; the authors' ``dis_gen/data-gen.py``).

A sentence is ``left + [w1] + middle + [w2] + right``, cut to 120 words; the label is the number of places
from w1 to w2, ``len(middle) + 1`` ∈ {2..71}. Per sample ``len(middle) ~ U{1..70}`` and ``len(left),
len(right) ~ U{1..25}``; each segment's words are drawn without replacement within the segment
(``random.sample``), independently of the other segments. The longest sentence has 122 words, so the cut
only ever shortens the right segment (w2 sits at position 96 at most).

Fillers, as the authors draw them, come from all 569 words and so may be w1 or w2 (about a fifth of the
samples then hold a third trigger, which makes the distance ambiguous from the tokens alone). The option
``exclude_trigger_fillers: true`` draws them from the other 567 words, so every sentence holds each trigger
once.

The authors also drop exact duplicates; with at least three fillers out of 569 words per sample, two equal
samples among 100,000 have a probability below 1e-7, so none are looked for and a split has exactly ``n``.

Triggers. The authors sample w1, w2 once per run (unseeded). Here they are fixed words of the task
(:data:`TRIGGERS`), the same for every seed and split: "sampled once for the whole dataset" holds, train and
test share them, and the answer checker knows them without the seed.

Per-sample array ``trigger_pos`` (uint8): the position of w1 (= ``len(left)``, 1..25); w2 is at
``trigger_pos + label``. It is what makes the answer checkable when fillers may be triggers, and it is the
sample's absolute position, which the deposit-pattern analyses can condition on.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from posym.data.tasks import TaskData

from .words import (
    CHUNK,
    Shape,
    WORD_IDS,
    WordTask,
    layout_checks,
    ordered_samples,
    raise_first,
    sentence_lengths,
)

#: w1, w2: the first two words of ``np.random.default_rng(20240602).permutation(569)`` (written out so that a
#: change of NumPy's streams cannot move them; ``count``'s triggers are the next 30).
TRIGGERS = ("w173", "w314")
MAX_BETWEEN = 70  # the authors' max_words_between
MAX_SIDE = 25  # max_words_side
MIN_LABEL = 2  # the largest is MAX_BETWEEN + 1 (71) at the authors' length, scaled with it


class DistanceTask(WordTask):
    name = "distance"
    index = 0
    triggers = TRIGGERS
    dtypes = {"tokens": np.uint16, "labels": np.uint8, "trigger_pos": np.uint8}

    def settings(self, options: Mapping) -> dict:
        exclude = options.get("exclude_trigger_fillers", False)
        if not isinstance(exclude, bool):
            raise ValueError(f"exclude_trigger_fillers must be true or false, got {exclude!r}")
        return {**super().settings(options), "exclude_trigger_fillers": exclude}

    def make_chunk(self, draw: np.random.Generator, settings: dict) -> dict[str, np.ndarray]:
        shape = Shape(settings["length"])
        most_between, most_side = shape.scaled(MAX_BETWEEN), shape.scaled(MAX_SIDE)
        w1, w2 = self.trigger_ids
        words = WORD_IDS[~np.isin(WORD_IDS, self.trigger_ids)] if settings["exclude_trigger_fillers"] else WORD_IDS
        between = draw.integers(1, most_between + 1, CHUNK)
        left = draw.integers(1, most_side + 1, CHUNK)
        right = draw.integers(1, most_side + 1, CHUNK)
        segments = [ordered_samples(draw, words, CHUNK, k) for k in (most_side, most_between, most_side)]

        # Each segment keeps the first len(segment) of its sample, written from its offset in the sentence; the
        # right segment stops at the 120-word cut.
        p1, p2 = left, left + 1 + between
        tokens = np.zeros((CHUNK, shape.length), dtype=np.int64)
        for words_, start, size in zip(segments, (np.zeros_like(p1), p1 + 1, p2 + 1), (left, between, right)):
            place = np.arange(words_.shape[1])[None, :]
            column = start[:, None] + place
            rows, places = np.nonzero((place < size[:, None]) & (column < shape.sentence))
            tokens[rows, column[rows, places]] = words_[rows, places]
        tokens[np.arange(CHUNK), p1] = w1
        tokens[np.arange(CHUNK), p2] = w2
        return {"tokens": tokens, "labels": between + 1, "trigger_pos": p1}

    def validate(self, data: TaskData) -> None:
        """Recompute each answer from the tokens and w1's position: w1 at ``trigger_pos`` (1..25), w2 at
        ``trigger_pos + label``, label in 2..71; the sentence ends 1..25 words after w2 (fewer only where cut at
        120) and only padding follows it; every sentence id is a word.

        Where fillers may be triggers, a label moved onto another w2 would pass: it is then still a distance from
        w1 to a w2. With ``exclude_trigger_fillers`` each trigger occurs once and the label is fully determined."""
        tokens, labels = data.tokens.astype(np.int64), data.labels.astype(np.int64)
        shape = Shape(tokens.shape[1])
        most_between, most_side, width = shape.scaled(MAX_BETWEEN), shape.scaled(MAX_SIDE), shape.length
        w1, w2 = self.trigger_ids
        rows = np.arange(len(data))
        p1 = data.trigger_pos.astype(np.int64)
        p2 = p1 + labels
        length = sentence_lengths(tokens)
        checks = [
            ((labels < MIN_LABEL) | (labels > most_between + 1), f"label outside {MIN_LABEL}..{most_between + 1}"),
            ((p1 < 1) | (p1 > most_side), f"trigger_pos outside 1..{most_side}"),
            (tokens[rows, np.clip(p1, 0, width - 1)] != w1, f"no {TRIGGERS[0]} at trigger_pos"),
            (tokens[rows, np.clip(p2, 0, width - 1)] != w2, f"no {TRIGGERS[1]} at trigger_pos + label"),
            (
                (length < p2 + 2) | (length > np.minimum(p2 + 1 + most_side, shape.sentence)),
                f"the sentence does not end 1..{most_side} words after {TRIGGERS[1]} (or at {shape.sentence})",
            ),
            *layout_checks(tokens, length),
        ]
        raise_first(self.name, checks)


TASK = DistanceTask()
