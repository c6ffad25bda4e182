"""A toy task: eight random symbols; the answer is the first one (the model must look back to position 0)."""

from __future__ import annotations

import numpy as np

from posym.data.tasks import PAD, Task, TaskData, Vocab

SYMBOLS = 16
LENGTH = 8
SPLITS = ("train", "val", "test")


class FirstToken(Task):
    name = "first_token"
    dtypes = {"tokens": np.uint8, "labels": np.uint8}
    answer_position = 0

    def build_vocabulary(self) -> Vocab:
        return Vocab((PAD, *(f"s{k}" for k in range(SYMBOLS))))

    def generate(self, split: str, n: int, base_seed: int, options={}) -> tuple[TaskData, dict]:
        draw = np.random.default_rng([base_seed, SPLITS.index(split)])
        tokens = draw.integers(1, SYMBOLS + 1, size=(n, LENGTH)).astype(np.uint8)
        return TaskData(self.name, tokens, tokens[:, self.answer_position].copy()), {"seed": base_seed}

    def validate(self, data: TaskData) -> None:
        bad = np.flatnonzero((data.labels != data.tokens[:, self.answer_position]) | (data.tokens == 0).any(axis=1))
        if bad.size:
            raise ValueError(f"{self.name} sample {int(bad[0])}: the label is not the answer ({bad.size} bad samples)")


TASK = FirstToken()
