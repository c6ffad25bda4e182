"""Paper B's position-agnostic task, "count" (spec §B2, Task 2; the authors' ``count_gen/data-gen.py``).

A sentence is always 120 words: ``count ~ U{0..100}`` trigger words, each drawn with replacement from the 30
triggers, and ``120 - count`` fillers drawn with replacement from the 539 other words, shuffled together.
The label is ``count``. Count 0 is ignored by the loss and the accuracy (the authors' ``ignore_index=0``):
:attr:`ignored_label`, which the core's loss and :meth:`posym.data.tasks.Task.accuracy_rows` honour.

Triggers. The authors sample 30 trigger words once per run (unseeded). Here they are fixed words of the task
(:data:`TRIGGERS`), the same for every seed and split ("30 fixed trigger words"): train and test share them,
and the answer checker counts them without knowing the seed.
"""

from __future__ import annotations

import numpy as np

from posym.data.tasks import TaskData

from .words import CHUNK, WORD_IDS, Shape, WordTask, layout_checks, raise_first

#: Words 3..32 of ``np.random.default_rng(20240602).permutation(569)`` (``distance``'s triggers are the first
#: two, so the tasks share none), written out so that a change of NumPy's streams cannot move them.
TRIGGERS = (
    "w553", "w456", "w558", "w110", "w111", "w003", "w203", "w393", "w065", "w212",
    "w446", "w201", "w236", "w567", "w175", "w334", "w520", "w304", "w403", "w514",
    "w431", "w390", "w063", "w394", "w426", "w168", "w231", "w305", "w356", "w177",
)  # fmt: skip
MAX_COUNT = 100  # the authors' min(100, max_sentence_length)


class CountTask(WordTask):
    name = "count"
    index = 1
    triggers = TRIGGERS
    dtypes = {"tokens": np.uint16, "labels": np.uint8}
    ignored_label = 0

    def make_chunk(self, draw: np.random.Generator, settings: dict) -> dict[str, np.ndarray]:
        triggers = self.trigger_ids
        fillers = WORD_IDS[~np.isin(WORD_IDS, triggers)]
        shape = Shape(settings["length"])
        sentence = shape.sentence
        count = draw.integers(0, shape.scaled(MAX_COUNT) + 1, CHUNK)
        picked = triggers[draw.integers(0, len(triggers), (CHUNK, sentence))]
        filled = fillers[draw.integers(0, len(fillers), (CHUNK, sentence))]
        # The first `count` places take triggers, the rest fillers; a uniform shuffle of each row then mixes them.
        words = np.where(np.arange(sentence)[None, :] < count[:, None], picked, filled)
        words = np.take_along_axis(words, np.argsort(draw.random((CHUNK, sentence)), axis=1), axis=1)
        tokens = np.zeros((CHUNK, shape.length), dtype=np.int64)
        tokens[:, :sentence] = words
        return {"tokens": tokens, "labels": count}

    def validate(self, data: TaskData) -> None:
        """Count the triggers of each sentence: the label must be that number, at most 100; every sentence is 120
        words followed by padding."""
        tokens, labels = data.tokens.astype(np.int64), data.labels.astype(np.int64)
        shape = Shape(tokens.shape[1])
        most = shape.scaled(MAX_COUNT)
        counted = np.isin(tokens, self.trigger_ids).sum(axis=1)
        checks = [
            (labels > most, f"label above {most}"),
            (labels != counted, "the label is not the number of trigger words"),
            *layout_checks(tokens, np.full(len(data), shape.sentence)),
        ]
        raise_first(self.name, checks)


TASK = CountTask()
