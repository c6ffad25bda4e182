"""Where the core's artifacts live: one owner for each path pattern that more than one place reads.

The core's rules write these; a study's rules, its ``study.yaml`` (as ``core:<name>``, :data:`NAMED`) and the other
studies' rules read them from here, so that a layout change is made once. A run is ``{variant}/{task}/seed{seed}``
(:data:`RUN`) under each kind of result; data are shared by a study's variants, so their folders have no variant.
"""

from __future__ import annotations

import os
import string

RESULTS = "results"
LOGS = "logs"

#: One run of a study's grid (posym.pipeline.variants), under each kind of result.
RUN = "{variant}/{task}/seed{seed}"

#: A task's dataset of one seed, and one split of it (tensors, and its record beside them).
DATA = "results/{study}/data/{task}/seed{seed}"
SPLIT = DATA + "/{split}.safetensors"
SPLIT_RECORD = DATA + "/{split}.json"

#: A run's folder: its checkpoints/ (of the variant that trained it), the index of them the analyses read, the
#: test accuracy over training and the training losses.
TRAINED = "results/{study}/train/" + RUN
CHECKPOINTS = TRAINED + "/checkpoints.json"
METRICS = TRAINED + "/metrics.csv"
LOSSES = TRAINED + "/train_log.csv"
#: The record of one training job: a pack of seeds trained as one model.
PACK = "results/{study}/train/{variant}/{task}/packs/{pack}.json"
#: A run's final checkpoint's accuracy on the whole test split.
TEST_ACCURACY = "results/{study}/eval/" + RUN + "/test.csv"

#: The names a study.yaml path may use (``core:checkpoints``), each relative to its study's results folder.
NAMED = {
    "checkpoints": CHECKPOINTS,
    "metrics": METRICS,
    "test_accuracy": TEST_ACCURACY,
    "test_split_record": SPLIT_RECORD.replace("{split}", "test"),
    "train_split_record": SPLIT_RECORD.replace("{split}", "train"),
}
CORE_PREFIX = "core:"


class _Keep(dict):
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def of(pattern: str, **values) -> str:
    """``pattern`` with the wildcards in ``values`` filled and the others left as wildcards:
    ``of(CHECKPOINTS, study="b")`` is ``results/b/train/{variant}/{task}/seed{seed}/checkpoints.json``."""
    return string.Formatter().vformat(pattern, (), _Keep(values))


def study_path(study_id: str, path: str) -> str:
    """A path of ``study_id``'s study.yaml: ``core:<name>`` (:data:`NAMED`), or a path under the study's results
    folder, in which ``{run}`` stands for :data:`RUN`."""
    if path.startswith(CORE_PREFIX):
        name = path[len(CORE_PREFIX):]
        if name not in NAMED:
            raise KeyError(f"{path!r} names no core path; expected one of {sorted(NAMED)}")
        return of(NAMED[name], study=study_id)
    return f"{RESULTS}/{study_id}/" + path.replace("{run}", RUN)


def log(path: str) -> str:
    """The log of the job that writes ``path``: the same path under logs/, as .log."""
    return os.path.splitext(path.replace(f"{RESULTS}/", f"{LOGS}/", 1))[0] + ".log"
