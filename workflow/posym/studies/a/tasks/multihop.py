"""What paper A's two tasks share: the multi-hop layout, the authors' balanced and reseeded generator scheme,
chain following, the length extension and the per-hop accuracy. ``number.py`` and ``letter.py`` add what is
their own (vocabulary, the random draws of one sample, how a hop is followed, fillers, examples, LLM probes).

The generators reproduce the authors' ``SequenceMultiHopDatasetGenerator`` (Number) and
``SequenceSymbolicDatasetGenerator`` (Letter) draw for draw (spec §A2), so a split made here holds the same
token ids, in the same order, as the one their code makes for the same size and seed. That is checked against
their code (jcalataiut-cli/CENIA, commit 53de17a) by a regression oracle in ``tests/studies/a/test_a_tasks.py``. The
implementation is our own; only the facts of their scheme (the balancing table, the per-sample reseeding with
``seed + idx``, the order of the random calls) carry over.

Layout of a 17-token input (spec §A2), positions 0-indexed::

    0..7    target window: Number, letters; Letter, (letter, digit) pairs
    8..15   pre-target window: Number, backward offsets '1'..'16'; Letter, (letter, letter) pairs
    16      query: an offset (Number) or a (letter, letter) pair (Letter)

The answer (label) is the target-window token the hop chain from the query ends on. The collator of the
training code appends it as an 18th token; here it is kept apart in ``TaskData.labels``.

Why per-sample reseeding matters: the authors reseed Python's ``random`` and NumPy's legacy global generator
with ``seed + idx`` before every sample (torch is reseeded too, but draws nothing, so it is skipped here). Any
single sample can therefore be regenerated alone (:meth:`MultiHopTask.generate_rows`) from the balancing table,
which is cached.
"""

from __future__ import annotations

import functools
import random
from typing import Mapping

import numpy as np

from posym.data.tasks import Task, TaskData

HOP_LENS = (1, 2, 3, 4)
WINDOW = 8  # target-window length n1 (``num_leafs``)
CONTEXT = 16  # positions before the query (``context_len``): target + pre-target windows
SEQ_LEN = CONTEXT + 1  # 17 input tokens, the query last
QUERY_BLOCK = SEQ_LEN - WINDOW  # 9: pre-target window + query, the part length extension never touches

#: split name -> offset added to the base seed: val and test are seeded right after the samples of the splits
#: before them at the paper's sizes (432,000 / 2,400 / 45,600 = 90 / 0.5 / 9.5 % of 480,000; spec §A2, "Split").
#: The offsets stay when a config changes the sizes.
SPLIT_SEED_OFFSETS = {"train": 0, "val": 432_000, "test": 434_400}
#: The size of the paper's test split, from which the length-extended sets take their base samples whatever the
#: configured ``data.test_samples`` (a test pins it to the schema's default).
PAPER_TEST_SAMPLES = 45_600

_PRE_TARGET = range(WINDOW, CONTEXT)  # the positions intermediate hops land on
_CHAIN_WIDTH = len(HOP_LENS) + 1  # query + up to 3 intermediate hops + target

#: How the length protocol picks the tokens it prepends (spec §A10.1): the paper says only "extra symbols prior to
#: the window containing the to-be-retrieved target symbol" (§3.6) and the spec's rule is PROPOSED (§Y lists it as
#: unknown). Each rule draws from the task's *proper* fillers (:meth:`MultiHopTask.filler_pool`: tokens of the
#: target window's kind that keep the answer unique) and differs only in which of them and how.
FILLER_RULES = {
    "uniform": "uniform over the proper fillers, a fresh draw per position (the spec's PROPOSED rule: Number any of "
    "the 120 letters, Letter (letter, digit) pairs whose letter is off the chain)",
    "outside-window": "uniform over the proper fillers that do not occur in the sample's target window",
    "in-window": "uniform over the proper fillers that occur in the sample's target window: copies of its tokens, the "
    "answer among them for Number (Letter's answer pair is on the chain, so never a filler)",
    "fixed": "one proper filler per sample, drawn uniformly, repeated at every prepended position",
}
#: The rule of Fig 5B and claim A-5 unless ``length.filler`` says otherwise.
DEFAULT_FILLER = "uniform"

#: Samples made per call of a task's row maker, to bound the temporary memory (a train split is made in 11 chunks).
CHUNK_ROWS = 40_000


def split_seed(split: str, base_seed: int) -> int:
    return base_seed + SPLIT_SEED_OFFSETS[split]


def filler_seed(data_seed: int, extra: int) -> int:
    """Seed of the fillers of the set with ``extra`` prepended tokens: each length draws from its own stream, and every
    filler rule from the same one, so the protocol's ``uniform`` sets are Fig 5B's."""
    return int(np.random.SeedSequence([data_seed, extra]).generate_state(1)[0])


def draw_from(allowed: np.ndarray, k: int, draw: np.random.Generator) -> np.ndarray:
    """(N, k) token ids, each drawn uniformly from its row's ``allowed`` ids (an (N, vocabulary) mask)."""
    count = allowed.sum(axis=1)
    if (count == 0).any():
        raise ValueError(f"sample {int(np.flatnonzero(count == 0)[0])} has no allowed filler token")
    order = np.argsort(~allowed, axis=1, kind="stable")  # allowed ids first, ascending
    pick = np.floor(draw.random((len(allowed), k)) * count[:, None]).astype(np.int64)
    return np.take_along_axis(order, pick, axis=1)


def padded_chain(target: int, middle: list[int]) -> list[int]:
    """Positions the chain visits, from the query: [16, a_{h-1}, ..., a_1, target] (``middle`` ascending),
    padded with -1 to a fixed width."""
    chain = [CONTEXT] + middle[::-1] + [target]
    return chain + [-1] * (_CHAIN_WIDTH - len(chain))


def on_chain_steps(chains: np.ndarray):
    """Yield (rows, source, dest) for every hop of every chain, one hop index at a time."""
    for step in range(_CHAIN_WIDTH - 1):
        rows = np.flatnonzero(chains[:, step + 1] >= 0)
        yield rows, chains[rows, step], chains[rows, step + 1]


def draw_middle(py_random: random.Random, hops: int) -> list[int]:
    """The first random call of both generators: the sorted positions of the intermediate hops."""
    return sorted(py_random.sample(_PRE_TARGET, hops - 1))


def flag(problem: np.ndarray, reasons: list[str], bad: np.ndarray, reason: str) -> None:
    """Record ``reason`` for the samples in ``bad`` that have no problem yet."""
    if bad.any():
        if reason not in reasons:
            reasons.append(reason)
        problem[bad & (problem < 0)] = reasons.index(reason)


class MultiHopTask(Task):
    """A paper A task: 17 tokens, a hop chain from the query to the answer in the target window (spec §A1, §A2).

    Subclasses give the vocabulary, ``combination_counts`` (the attributes of an answer that the balancing
    table enumerates), :meth:`make_rows`, :meth:`labels_of`, :meth:`follow`, the fillers (:meth:`filler_pool`,
    :meth:`uniform_fillers`) and the examples.
    """

    dtypes = {"tokens": np.uint8, "labels": np.uint8, "hops": np.uint8, "target_pos": np.int32}
    combination_counts: tuple[int, ...]
    #: The paper's Fig 3 input (spec §A8), the query last; Fig 3A/B, Fig 4B/C draw it.
    fig3_input: str
    #: The paper's Fig 1 example (spec §A1), its first ``window`` tokens the target window.
    fig1_example: dict
    #: Colour of the task in every figure.
    colour: str
    #: Offset of the task in the seed of the LLM probe items (spec §A10.2), so both tasks draw their own items.
    probe_stream: int
    #: The few-shot prompt of the LLM probes (spec §A10.2, Table 2); ``{sequence}`` marks the probe.
    probe_prompt: str
    #: The prompt's few-shot examples as (input, answer), kept apart so tests can check each obeys the rule.
    probe_examples: tuple[tuple[str, str], ...]

    # ---------------------------------------------------------------------------------------- subclass parts

    def make_rows(self, parts: dict[str, np.ndarray], seeds: np.ndarray) -> np.ndarray:
        """Token ids (N, 17) of samples whose answers have attributes ``parts``, sample k seeded ``seeds[k]``."""
        raise NotImplementedError

    def labels_of(self, parts: dict[str, np.ndarray]) -> np.ndarray:
        raise NotImplementedError

    def unpack(self, codes: np.ndarray) -> dict[str, np.ndarray]:
        """Split balancing-table codes into the answer's attributes (target_pos, hops, ...)."""
        raise NotImplementedError

    def follow(self, tokens: np.ndarray, problem: np.ndarray, reasons: list[str]):
        """Follow every sample's chain from the query: hop counts, end positions and (N, 9) positions visited."""
        raise NotImplementedError

    def check_layout(self, tokens: np.ndarray, problem: np.ndarray, reasons: list[str], query_kind: np.ndarray, kinds: str) -> None:
        """Flag samples with padding or ids outside the vocabulary, and those whose last 9 tokens are not all of
        the kind the pre-target window and the query hold (``query_kind``, per token) and the others all not."""
        length = tokens.shape[1]
        query_region = np.arange(length) >= length - QUERY_BLOCK
        in_range = tokens < len(self.vocabulary)
        flag(problem, reasons, ~in_range.all(axis=1) | (tokens == 0).any(axis=1), "token id is padding or out of range")
        flag(problem, reasons, (query_kind != query_region).any(axis=1), f"the last {QUERY_BLOCK} tokens must be {kinds}")

    def filler_pool(self, data: TaskData) -> np.ndarray:
        """(N, vocabulary) mask of the proper fillers of each sample: tokens that may be prepended to it and keep it
        proper (the answer unique, the chain unchanged)."""
        raise NotImplementedError

    def uniform_fillers(self, data: TaskData, extra: int, draw: np.random.Generator) -> np.ndarray:
        """(N, extra) fillers drawn uniformly from :meth:`filler_pool`, by the task's own draws (those that made the
        sets of Fig 5B before the other rules existed, so that those sets keep their bytes)."""
        raise NotImplementedError

    def fillers(self, data: TaskData, extra: int, draw: np.random.Generator, rule: str = DEFAULT_FILLER) -> np.ndarray:
        """(N, extra) filler ids to prepend (spec §A10.1) by ``rule``, one of :data:`FILLER_RULES`."""
        if rule not in FILLER_RULES:
            raise ValueError(f"unknown filler rule {rule!r} (the rules: {', '.join(FILLER_RULES)})")
        if rule == "uniform":
            return self.uniform_fillers(data, extra, draw)
        allowed = self.filler_pool(data)
        window = data.tokens[:, : data.seq_len - QUERY_BLOCK].astype(np.int64)
        in_window = np.zeros_like(allowed)
        in_window[np.arange(len(data))[:, None], window] = True
        if rule == "outside-window":
            allowed &= ~in_window
        elif rule == "in-window":
            allowed &= in_window
        try:
            if rule == "fixed":
                return np.repeat(draw_from(allowed, 1, draw), extra, axis=1)
            return draw_from(allowed, extra, draw)
        except ValueError as err:
            raise ValueError(f"{self.name} fillers by rule {rule!r}: {err}") from None

    def is_answer_id(self, ids: np.ndarray) -> np.ndarray:
        """Whether token ids are of the kind a hop chain ends on."""
        raise NotImplementedError

    def is_answer_token(self, token: str) -> bool:
        raise NotImplementedError

    def hop(self, tokens: list[str]) -> list[str]:
        """One layer of the idealised flow (spec §A9, Listing 1): Index or Retrieval."""
        raise NotImplementedError

    def follow_example(self, tokens: list[str]) -> list[int]:
        """Positions each hop lands on, from the last token, by the rules of spec §A1 on token strings."""
        raise NotImplementedError

    def probe_sequence(self, draw: np.random.Generator, window: int) -> tuple[list[str], int]:
        """One 1-hop LLM probe (window tokens, then the query) and the index of its answer (spec §A10.2)."""
        raise NotImplementedError

    def solve_probe(self, tokens: list[str]) -> str:
        """The answer to a probe by the prompt's rule; ``ValueError`` if it is not unique."""
        raise NotImplementedError

    # ----------------------------------------------------------------------------------------- generation

    def balancing_table(self, n: int, seed: int) -> np.ndarray:
        """Code of the answer combination of every sample of a split of ``n`` samples seeded ``seed`` (read-only).

        Both generators enumerate every combination of the answer's attributes (itertools.product in the order of
        ``combination_counts``), repeat the full list floor(N / len) times, add ``random.sample`` of it for the
        remainder, and shuffle, all with Python's ``random`` seeded once with ``seed``. ``random.sample`` and
        ``random.shuffle`` only depend on the lengths involved, so the table can be kept as integer codes.
        """
        return _balancing_table(int(np.prod(self.combination_counts)), n, seed)

    def generate_rows(self, n: int, seed: int, rows) -> TaskData:
        """Samples ``rows`` (indices, in the given order) of the split of ``n`` samples seeded ``seed``."""
        if seed < 0 or seed + n > 2**32:
            raise ValueError(f"seed {seed} out of range: seed + idx must fit NumPy's 32-bit legacy seeding")
        rows = np.asarray(rows, dtype=np.int64).reshape(-1)
        if rows.size and (rows.min() < 0 or rows.max() >= n):
            raise IndexError(f"sample index out of range for a split of {n} samples")
        codes = self.balancing_table(n, seed)[rows]
        seeds = seed + rows
        chunks = [
            self.make_rows(self.unpack(codes[a : a + CHUNK_ROWS]), seeds[a : a + CHUNK_ROWS])
            for a in range(0, len(codes), CHUNK_ROWS)
        ]  # every sample has its own seed, so the chunking cannot change a byte
        tokens = np.concatenate(chunks) if chunks else np.empty((0, SEQ_LEN), dtype=np.uint8)
        parts = self.unpack(codes)
        return TaskData(
            self.name,
            tokens,
            self.labels_of(parts).astype(np.uint8),
            {"hops": parts["hops"].astype(np.uint8), "target_pos": parts["target_pos"].astype(np.int32)},
        )

    def samples(self, n: int, seed: int) -> TaskData:
        """All ``n`` samples of the set seeded ``seed``, balanced and seeded as by the authors' generator.

        About 11 s (Number) / 13 s (Letter) for the 432,000-sample train split on one CPU core.
        """
        return self.generate_rows(n, seed, np.arange(n))

    def generate_sample(self, n: int, seed: int, idx: int) -> TaskData:
        """Sample ``idx`` of ``samples(n, seed)``, made alone (a one-row TaskData)."""
        return self.generate_rows(n, seed, [idx])

    def generate_split(self, split: str, base_seed: int, size: int) -> TaskData:
        """A split of spec §A2: ``size`` samples seeded ``base_seed`` plus the split's offset."""
        return self.samples(size, split_seed(split, base_seed))

    def generate(self, split: str, n: int, base_seed: int, options: Mapping = {}) -> tuple[TaskData, dict]:
        return self.generate_split(split, base_seed, n), {"seed": split_seed(split, base_seed)}

    def head(self, split: str, size: int, base_seed: int, n: int, options: Mapping = {}) -> TaskData:
        return self.generate_rows(size, split_seed(split, base_seed), np.arange(n))

    # ----------------------------------------------------------------------------------------- checking

    def _follow(self, data: TaskData):
        problem = np.full(len(data), -1)
        reasons: list[str] = []
        hops, end, path = self.follow(data.tokens, problem, reasons)
        return hops, end, path, problem, reasons

    def validate(self, data: TaskData) -> None:
        """Re-follow every sample's hop chain from the query and check label, hop count and target position.

        Raises ``ValueError`` naming the first bad sample and why. Works at any length, so extended data
        (:meth:`extend`) is checked the same way.
        """
        hops, end, _, problem, reasons = self._follow(data)
        rows = np.arange(len(data))
        ok = problem < 0
        flag(problem, reasons, ok & ~np.isin(data.hops, HOP_LENS), "hop count outside 1..4")
        flag(problem, reasons, ok & (hops != data.hops), "the chain takes a different number of hops than recorded")
        flag(problem, reasons, ok & (end != data.target_pos), "the chain ends at a different position than recorded")
        flag(
            problem, reasons, ok & (data.tokens[rows, end] != data.labels), "the label is not the token the chain reaches"
        )
        bad = np.flatnonzero(problem >= 0)
        if bad.size:
            first_bad = int(bad[0])
            raise ValueError(f"{data.task} sample {first_bad}: {reasons[problem[first_bad]]} ({bad.size} bad samples)")

    def chain_positions(self, data: TaskData) -> np.ndarray:
        """(N, 4) positions each hop lands on, in hop order, padded with -1; the last one is the answer's.

        Call :meth:`validate` first: ill-formed samples get whatever positions were reached.
        """
        return self._follow(data)[2][:, : max(HOP_LENS)]

    def accuracy_rows(self, predictions: np.ndarray, data: TaskData) -> list[dict]:
        """Rows {hop, accuracy, n} for each hop length present and for ``hop='all'`` (spec §A4)."""
        correct = np.asarray(predictions) == np.asarray(data.labels)
        hops = np.asarray(data.hops)
        rows = [
            {"hop": str(int(h)), "accuracy": float(correct[hops == h].mean()), "n": int((hops == h).sum())}
            for h in np.unique(hops)
        ]
        rows.append({"hop": "all", "accuracy": float(correct.mean()), "n": int(correct.size)})
        return rows

    # -------------------------------------------------------------------------------------- length extension

    def extend(self, data: TaskData, extra: int, seed: int, rule: str = DEFAULT_FILLER) -> TaskData:
        """Prepend ``extra`` filler tokens chosen by ``rule`` (spec §A10.1, :data:`FILLER_RULES`): the target window
        grows at the front, the pre-target window, the query, the hop structure and the answer are untouched, and
        ``target_pos`` moves by ``extra``. Deterministic given ``seed``."""
        if extra < 0:
            raise ValueError("extra must be ≥ 0")
        fillers = self.fillers(data, extra, np.random.default_rng(seed), rule)
        return TaskData(
            self.name,
            np.concatenate([fillers.astype(np.uint8), data.tokens], axis=1),
            data.labels.copy(),
            {"hops": data.hops.copy(), "target_pos": (data.target_pos + extra).astype(np.int32)},
        )

    def hop_balanced_rows(self, n: int, split_size: int, seed: int) -> np.ndarray:
        """Indices of the first ``n / 4`` samples of each hop count in the given split, in split order."""
        if n % len(HOP_LENS):
            raise ValueError(f"n = {n} must be a multiple of {len(HOP_LENS)} to balance over hops")
        hops = self.unpack(self.balancing_table(split_size, seed))["hops"]
        per_hop = n // len(HOP_LENS)
        chosen = [np.flatnonzero(hops == h)[:per_hop] for h in HOP_LENS]
        if any(len(rows) < per_hop for rows in chosen):
            raise ValueError(f"the split has fewer than {per_hop} samples of some hop count")
        return np.sort(np.concatenate(chosen))

    def length_base_set(self, n: int, base_seed: int) -> TaskData:
        """The samples every length-extended set of ``base_seed`` starts from: the first ``n / 4`` of each hop count
        in the paper-size test split of ``base_seed``."""
        seed_of_test = split_seed("test", base_seed)
        rows = self.hop_balanced_rows(n, PAPER_TEST_SAMPLES, seed_of_test)
        return self.generate_rows(PAPER_TEST_SAMPLES, seed_of_test, rows)

    def length_extension_set(self, n: int, extra: int, seed: int, base_seed: int, rule: str = DEFAULT_FILLER) -> TaskData:
        """``n`` test samples, exactly balanced over hops, with ``extra`` fillers prepended by ``rule`` (spec §A10.1).

        The base samples are :meth:`length_base_set`'s, so every length is measured on the same samples and only
        the fillers (from ``seed``) differ.
        """
        return self.extend(self.length_base_set(n, base_seed), extra, seed, rule)

    # ------------------------------------------------------------------------------------------ LLM probes

    def render_probe(self, sequence_tokens) -> str:
        """The few-shot prompt asking about ``sequence_tokens`` (window tokens then the query)."""
        return self.probe_prompt.replace("{sequence}", " ".join(sequence_tokens))


@functools.lru_cache(maxsize=16)
def _balancing_table(combinations: int, n: int, seed: int) -> np.ndarray:
    draw = random.Random(seed)
    codes = list(range(combinations)) * (n // combinations) + draw.sample(range(combinations), n % combinations)
    draw.shuffle(codes)
    table = np.array(codes, dtype=np.int32)
    table.flags.writeable = False
    return table
