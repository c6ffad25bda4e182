"""The Number and Letter multi-hop tasks of paper A: vocabularies, generators, validation, length extension.

The generators reproduce the authors' ``SequenceMultiHopDatasetGenerator`` (Number) and
``SequenceSymbolicDatasetGenerator`` (Letter) draw for draw (spec §A2), so a split made here holds the same
token ids, in the same order, as the one their code makes for the same size and seed. That is checked against
their code (jcalataiut-cli/CENIA, commit 53de17a) by a regression oracle in ``tests/test_tasks.py``. The
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
single sample can therefore be regenerated alone (:func:`generate_sample`) from the balancing table, which is
cached.
"""

from __future__ import annotations

import functools
import itertools
import random
import string
from dataclasses import dataclass

import numpy as np

TASKS = ("number", "letter")
HOP_LENS = (1, 2, 3, 4)
WINDOW = 8  # target-window length n1 (``num_leafs``)
CONTEXT = 16  # positions before the query (``context_len``): target + pre-target windows
SEQ_LEN = CONTEXT + 1  # 17 input tokens, the query last
QUERY_BLOCK = SEQ_LEN - WINDOW  # 9: pre-target window + query, the part length extension never touches

#: split name -> (size, offset added to the base seed). 432,000 / 2,400 / 45,600 = 90 / 0.5 / 9.5 % of 480,000,
#: with val and test seeded right after the samples of the splits before them (spec §A2, "Split").
SPLITS = {"train": (432_000, 0), "val": (2_400, 432_000), "test": (45_600, 434_400)}
DEFAULT_BASE_SEED = 42  # PROPOSED in the spec: the default of the authors' (reconstructed) schema

# ----------------------------------------------------------------------------------------------- vocabularies

#: The Number task's 120 letter tokens: a..z, then the lowercase bigrams aa, ab, ..., az, ba, ..., cut at 120,
#: i.e. ending with ``dp`` (spec §A2; the authors index ``ascii_letters`` with range(26) twice, so lowercase).
NUMBER_LETTERS = tuple(
    (list(string.ascii_lowercase) + [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase])[:120]
)
NUMBER_MAX_OFFSET = CONTEXT  # offsets are '1'..'16'
#: The Letter task's 8 letters a..h and its digits 1..8.
LETTER_LETTERS = tuple(string.ascii_lowercase[:8])
LETTER_DIGITS = tuple(range(1, 9))

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

    def __len__(self) -> int:
        return len(self.tokens)


# Id layout, shared by the generators below.
NUMBER_FIRST_LETTER_ID = 1 + NUMBER_MAX_OFFSET  # 17: '1'..'16' take ids 1..16, as the authors' tokenizer does
LETTER_FIRST_PAIR_ID = 1 + len(LETTER_LETTERS) * len(LETTER_DIGITS)  # 65: (letter, letter) pairs start here


@functools.cache
def vocabulary(task: str) -> Vocab:
    """The id -> token table of ``task`` (spec §A2): Number 137 tokens, Letter 129."""
    _check_task(task)
    if task == "number":
        tokens = [PAD] + [str(k) for k in range(1, NUMBER_MAX_OFFSET + 1)] + list(NUMBER_LETTERS)
    else:
        tokens = [PAD] + [f"{a}{d}" for a, d in itertools.product(LETTER_LETTERS, LETTER_DIGITS)]
        tokens += [a + b for a, b in itertools.product(LETTER_LETTERS, LETTER_LETTERS)]
    return Vocab(tuple(tokens))


def decode(task: str, ids) -> list[str]:
    """Token strings of a 1-D sequence of ids."""
    tokens = vocabulary(task).tokens
    return [tokens[int(i)] for i in np.asarray(ids).reshape(-1)]


def _letter_digit_id(letter, digit):
    """Id of the Letter pair (letter index 0..7, digit 1..8); works on arrays."""
    return 1 + letter * len(LETTER_DIGITS) + (digit - 1)


def _letter_letter_id(first, second):
    """Id of the Letter pair (letter index, letter index); works on arrays."""
    return LETTER_FIRST_PAIR_ID + first * len(LETTER_LETTERS) + second


def _letter_parts(ids):
    """(first letter index, second part) of Letter ids: the second part is a letter index for (letter, letter)
    pairs and the digit minus one for (letter, digit) pairs."""
    ids = np.asarray(ids, dtype=np.int64)
    pair_of_letters = ids >= LETTER_FIRST_PAIR_ID
    index = np.where(pair_of_letters, ids - LETTER_FIRST_PAIR_ID, ids - 1)
    per_first = np.where(pair_of_letters, len(LETTER_LETTERS), len(LETTER_DIGITS))
    return index // per_first, index % per_first


def _check_task(task: str) -> None:
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")


# ------------------------------------------------------------------------------------------------ container


@dataclass(frozen=True, eq=False)
class TaskData:
    """A set of samples of one task.

    tokens      (N, L) uint8   input ids, the query last (L = 17, or more after :func:`extend`)
    labels      (N,)   uint8   id of the answer token
    hops        (N,)   uint8   hop count 1..4
    target_pos  (N,)   int32   index of the answer token inside ``tokens``
    """

    task: str
    tokens: np.ndarray
    labels: np.ndarray
    hops: np.ndarray
    target_pos: np.ndarray

    ARRAYS = ("tokens", "labels", "hops", "target_pos")
    DTYPES = {"tokens": np.uint8, "labels": np.uint8, "hops": np.uint8, "target_pos": np.int32}

    def __post_init__(self):
        _check_task(self.task)
        if self.tokens.ndim != 2:
            raise ValueError(f"tokens must be 2-D, got shape {self.tokens.shape}")
        for name in self.ARRAYS:
            array = getattr(self, name)
            if array.dtype != self.DTYPES[name]:
                raise ValueError(f"{name} must be {np.dtype(self.DTYPES[name])}, got {array.dtype}")
            if len(array) != len(self.tokens) or (name != "tokens" and array.ndim != 1):
                raise ValueError(f"{name} has shape {array.shape}; expected {len(self.tokens)} rows")

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def seq_len(self) -> int:
        return self.tokens.shape[1]

    def select(self, rows) -> "TaskData":
        """The samples at ``rows`` (indices, a slice or a boolean mask)."""
        return TaskData(self.task, *(np.ascontiguousarray(getattr(self, name)[rows]) for name in self.ARRAYS))

    def arrays(self) -> dict[str, np.ndarray]:
        return {name: getattr(self, name) for name in self.ARRAYS}


# --------------------------------------------------------------------------------------------- balancing

# Both generators enumerate every combination of the answer's attributes (itertools.product in the order
# below), repeat the full list floor(N / len) times, add ``random.sample`` of it for the remainder, and shuffle,
# all with Python's ``random`` seeded once with ``seed``. ``random.sample`` and ``random.shuffle`` only depend on
# the lengths involved, so the table can be kept as integer codes into the product.
#   Number: (target_pos 0..7, letter 0..119, hop_len 1..4)            -> 3840 combinations
#   Letter: (target_pos 0..7, letter 0..7, digit 1..8, hop_len 1..4)  -> 2048 combinations


def _combination_counts(task: str) -> tuple[int, ...]:
    if task == "number":
        return (WINDOW, len(NUMBER_LETTERS), len(HOP_LENS))
    return (WINDOW, len(LETTER_LETTERS), len(LETTER_DIGITS), len(HOP_LENS))


@functools.lru_cache(maxsize=16)
def balancing_table(task: str, n: int, seed: int) -> np.ndarray:
    """Code of the answer combination of every sample of a split of ``n`` samples seeded ``seed`` (read-only)."""
    _check_task(task)
    combos = int(np.prod(_combination_counts(task)))
    draw = random.Random(seed)
    codes = list(range(combos)) * (n // combos) + draw.sample(range(combos), n % combos)
    draw.shuffle(codes)
    table = np.array(codes, dtype=np.int32)
    table.flags.writeable = False
    return table


def _unpack(task: str, codes: np.ndarray) -> dict[str, np.ndarray]:
    """Split combination codes into target_pos, letter (index), digit (Letter only) and hop_len."""
    parts = np.unravel_index(codes, _combination_counts(task))
    if task == "number":
        target, letter, hop = parts
        return {"target_pos": target, "letter": letter, "hops": hop + 1}
    target, letter, digit, hop = parts
    return {"target_pos": target, "letter": letter, "digit": digit + 1, "hops": hop + 1}


# -------------------------------------------------------------------------------------------- generators

_PRE_TARGET = range(WINDOW, CONTEXT)  # the positions intermediate hops land on
_CHAIN_WIDTH = len(HOP_LENS) + 1  # query + up to 3 intermediate hops + target


def _padded_chain(target: int, middle: list[int]) -> list[int]:
    """Positions the chain visits, from the query: [16, a_{h-1}, ..., a_1, target] (``middle`` ascending),
    padded with -1 to a fixed width."""
    chain = [CONTEXT] + middle[::-1] + [target]
    return chain + [-1] * (_CHAIN_WIDTH - len(chain))


def _on_chain_steps(chains: np.ndarray):
    """Yield (rows, source, dest) for every hop of every chain, one hop index at a time."""
    for step in range(_CHAIN_WIDTH - 1):
        rows = np.flatnonzero(chains[:, step + 1] >= 0)
        yield rows, chains[rows, step], chains[rows, step + 1]


#: 32-bit MT19937 outputs kept per Number sample to replay NumPy's bounded draws (about 19 are used on
#: average; a sample that would need more is redrawn with ``randint`` itself, see ``_back_pointers``).
RAW_DRAWS = 48


def _back_pointers(raw: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Replay ``np.random.randint(0, np.arange(1, 18))[:-1]`` after ``np.random.seed(seed)``, for many seeds.

    ``raw`` holds each seed's first 32-bit MT19937 outputs. NumPy's legacy bounded integers draw ``v & mask``
    (mask = the smallest 2^b - 1 covering the range) until ``v`` is in range, one 32-bit output per try, and
    draw nothing for a range of one value. Replaying that on all samples at once is what makes the
    Number generator fast; ``tests/test_tasks.py`` checks it against ``randint`` itself.
    """
    n = len(raw)
    pointers = np.zeros((n, SEQ_LEN), dtype=np.int64)
    cursor = np.zeros(n, dtype=np.int64)
    for position in range(2, SEQ_LEN):  # position 0 is fixed and position 1 can only point to 0
        largest = position - 1
        mask = (1 << largest.bit_length()) - 1
        pending = np.flatnonzero(cursor < raw.shape[1])
        while pending.size:
            value = raw[pending, cursor[pending]] & mask
            cursor[pending] += 1
            accepted = value <= largest
            pointers[pending[accepted], position] = value[accepted]
            pending = pending[~accepted & (cursor[pending] < raw.shape[1])]
    exhausted = np.flatnonzero(cursor >= raw.shape[1])
    if exhausted.size:  # rare: replaying ran out of outputs; ask NumPy directly (same draws, slower)
        legacy = np.random.RandomState()
        bounds = np.arange(1, SEQ_LEN + 1)
        for row in exhausted:
            legacy.seed(int(seeds[row]))
            pointers[row, 1:] = legacy.randint(0, bounds)[:-1]
    return pointers


def _number_rows(codes: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Token ids of Number samples with answer combinations ``codes``, sample ``k`` seeded ``seeds[k]``.

    Random calls per sample, in the authors' order (spec §A2):
      1. Python: ``sample(range(8, 16), h-1)``, sorted = the intermediate hop positions;
      2. Python: ``choices(letters, k=8)`` = the target window (the answer then overwrites its slot);
      3. NumPy legacy: ``randint(0, arange(1, 18))`` = one back-pointer per position (position i points to a
         uniform earlier position 0..i-1; the 17th draw is discarded). The chain overwrites the pointers of the
         query and the intermediate hops; each pointer becomes the offset i - pointer.
    """
    parts = _unpack("number", codes)
    n = len(codes)
    py_random = random.Random()
    bit_generator = np.random.MT19937()
    legacy = np.random.RandomState(bit_generator)  # reseeding it is exactly ``np.random.seed``
    letter_choices = range(len(NUMBER_LETTERS))
    window: list[int] = []
    chains: list[int] = []
    raw = np.empty((n, RAW_DRAWS), dtype=np.uint64)
    for k, (target, hops, seed) in enumerate(zip(parts["target_pos"].tolist(), parts["hops"].tolist(), seeds.tolist())):
        py_random.seed(seed)
        middle = sorted(py_random.sample(_PRE_TARGET, hops - 1))
        window += py_random.choices(letter_choices, k=WINDOW)
        chains += _padded_chain(target, middle)
        legacy.seed(seed)
        raw[k] = bit_generator.random_raw(RAW_DRAWS)

    window_letters = np.array(window, dtype=np.int64).reshape(n, WINDOW)
    window_letters[np.arange(n), parts["target_pos"]] = parts["letter"]
    pointers = _back_pointers(raw, seeds)
    for rows, source, dest in _on_chain_steps(np.array(chains, dtype=np.int64).reshape(n, _CHAIN_WIDTH)):
        pointers[rows, source] = dest

    tokens = np.empty((n, SEQ_LEN), dtype=np.uint8)
    tokens[:, :WINDOW] = NUMBER_FIRST_LETTER_ID + window_letters
    tokens[:, WINDOW:] = np.arange(WINDOW, SEQ_LEN) - pointers[:, WINDOW:]  # offset k has id k
    return tokens


def _letter_rows(codes: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Token ids of Letter samples with answer combinations ``codes``, sample ``k`` seeded ``seeds[k]``.

    Random calls per sample, all Python ``random``, in the authors' order (spec §A2):
      1. ``sample(range(8, 16), h-1)``, sorted = intermediate hop positions;
      2. ``sample(others, h-1)`` = the letters of the intermediate hops, ``others`` being the 7 letters other
         than the answer's, in alphabetical order; the rest (``fillers``, 8-h letters) never lies on the chain;
      3. ``choices(fillers, k=16)`` then ``choice(fillers)`` = first letters of positions 0..15 and 16;
      4. ``choices(fillers, k=17)`` = second letters;
      5. ``choices(1..8, k=8)`` = the digits of the target window.
    Then the chain's first letters are set (answer letter at the target, hop letters at the hops), each chain
    position's second letter is set to the next chain position's first letter, and the answer's digit is set.
    NumPy's generator is reseeded by the authors but draws nothing here, so it is skipped.
    """
    parts = _unpack("letter", codes)
    n = len(codes)
    py_random = random.Random()
    letters = range(len(LETTER_LETTERS))
    first: list[int] = []
    second: list[int] = []
    digits: list[int] = []
    chains: list[int] = []
    chain_letters: list[int] = []
    rows = zip(parts["target_pos"].tolist(), parts["letter"].tolist(), parts["hops"].tolist(), seeds.tolist())
    for target, letter, hops, seed in rows:
        py_random.seed(seed)
        middle = sorted(py_random.sample(_PRE_TARGET, hops - 1))
        others = [x for x in letters if x != letter]
        hop_letters = py_random.sample(others, hops - 1)
        fillers = [x for x in others if x not in hop_letters]
        first += py_random.choices(fillers, k=CONTEXT)
        first.append(py_random.choice(fillers))
        second += py_random.choices(fillers, k=SEQ_LEN)
        digits += py_random.choices(LETTER_DIGITS, k=WINDOW)
        chains += _padded_chain(target, middle)
        chain_letters += hop_letters + [letter] + [-1] * (len(HOP_LENS) - hops)

    first_letters = np.array(first, dtype=np.int64).reshape(n, SEQ_LEN)
    second_parts = np.array(second, dtype=np.int64).reshape(n, SEQ_LEN)
    window_digits = np.array(digits, dtype=np.int64).reshape(n, WINDOW)
    chains_array = np.array(chains, dtype=np.int64).reshape(n, _CHAIN_WIDTH)
    chain_letters_array = np.array(chain_letters, dtype=np.int64).reshape(n, len(HOP_LENS))
    for step, (rows_, _, dest) in enumerate(_on_chain_steps(chains_array)):  # letters of the positions reached
        first_letters[rows_, dest] = chain_letters_array[rows_, step]
    for rows_, source, dest in _on_chain_steps(chains_array):  # each second letter names the next first letter
        second_parts[rows_, source] = first_letters[rows_, dest]
    window_digits[np.arange(n), parts["target_pos"]] = parts["digit"]

    tokens = np.empty((n, SEQ_LEN), dtype=np.uint8)
    tokens[:, :WINDOW] = _letter_digit_id(first_letters[:, :WINDOW], window_digits)
    tokens[:, WINDOW:] = _letter_letter_id(first_letters[:, WINDOW:], second_parts[:, WINDOW:])
    return tokens


_ROW_MAKERS = {"number": _number_rows, "letter": _letter_rows}


#: Samples made per call of a row maker, to bound the temporary memory (a train split is made in 11 chunks).
CHUNK_ROWS = 40_000


def _make_tokens(task: str, codes: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Token ids of the given samples, chunk by chunk. Every sample has its own seed, so the chunking cannot
    change a byte."""
    maker = _ROW_MAKERS[task]
    chunks = [maker(codes[a : a + CHUNK_ROWS], seeds[a : a + CHUNK_ROWS]) for a in range(0, len(codes), CHUNK_ROWS)]
    return np.concatenate(chunks) if chunks else np.empty((0, SEQ_LEN), dtype=np.uint8)


def generate_rows(task: str, n: int, seed: int, rows) -> TaskData:
    """Samples ``rows`` (indices, in the given order) of the split of ``n`` samples seeded ``seed``."""
    _check_task(task)
    if seed < 0 or seed + n > 2**32:
        raise ValueError(f"seed {seed} out of range: seed + idx must fit NumPy's 32-bit legacy seeding")
    rows = np.asarray(rows, dtype=np.int64).reshape(-1)
    if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise IndexError(f"sample index out of range for a split of {n} samples")
    codes = balancing_table(task, n, seed)[rows]
    tokens = _make_tokens(task, codes, seed + rows)
    parts = _unpack(task, codes)
    if task == "number":
        labels = NUMBER_FIRST_LETTER_ID + parts["letter"]
    else:
        labels = _letter_digit_id(parts["letter"], parts["digit"])
    return TaskData(
        task=task,
        tokens=tokens,
        labels=labels.astype(np.uint8),
        hops=parts["hops"].astype(np.uint8),
        target_pos=parts["target_pos"].astype(np.int32),
    )


def generate(task: str, n: int, seed: int) -> TaskData:
    """A whole split: ``n`` samples, balanced and seeded as by the authors' generator with ``seed``.

    About 11 s (Number) / 13 s (Letter) for the 432,000-sample train split on one CPU core.
    """
    return generate_rows(task, n, seed, np.arange(n))


def generate_sample(task: str, n: int, seed: int, idx: int) -> TaskData:
    """Sample ``idx`` of the split ``generate(task, n, seed)``, made alone (a one-row TaskData)."""
    return generate_rows(task, n, seed, [idx])


def split_seed(split: str, base_seed: int = DEFAULT_BASE_SEED) -> int:
    return base_seed + SPLITS[split][1]


def generate_split(task: str, split: str, base_seed: int = DEFAULT_BASE_SEED, size: int | None = None) -> TaskData:
    """The named split of spec §A2; ``size`` overrides its sample count (the seed offset stays)."""
    default_size, _ = SPLITS[split]
    return generate(task, default_size if size is None else size, split_seed(split, base_seed))


# -------------------------------------------------------------------------------------------- validation


def _follow_number(tokens: np.ndarray, problem: np.ndarray, reasons: list[str]):
    """Follow the offsets from the query back to a letter (spec §A1): hop count, end position, chain positions."""
    n, length = tokens.shape
    rows = np.arange(n)
    is_letter = tokens >= NUMBER_FIRST_LETTER_ID
    in_range = tokens < len(vocabulary("number"))
    offset_region = np.arange(length) >= length - QUERY_BLOCK
    _flag(problem, reasons, ~in_range.all(axis=1) | (tokens == 0).any(axis=1), "token id is padding or out of range")
    _flag(
        problem,
        reasons,
        (is_letter == offset_region).any(axis=1),
        f"the last {QUERY_BLOCK} tokens must be offsets and all earlier ones letters",
    )
    offsets = np.where(is_letter, 0, tokens.astype(np.int64))
    _flag(problem, reasons, (offsets > np.arange(length)).any(axis=1), "an offset jumps before the start")

    current = np.full(n, length - 1)
    hops = np.zeros(n, dtype=np.int64)
    path = np.full((n, QUERY_BLOCK), -1, dtype=np.int64)
    for step in range(QUERY_BLOCK):  # every jump goes back at least one place, so ≤ 9 jumps leave the offsets
        jumping = ~is_letter[rows, current] & (problem < 0)
        if not jumping.any():
            break
        current = np.where(jumping, current - offsets[rows, current], current)
        path[jumping, step] = current[jumping]
        hops += jumping
    return hops, current, path


def _follow_letter(tokens: np.ndarray, problem: np.ndarray, reasons: list[str]):
    """Follow the letters from the query (spec §A1): the second letter of each pair names the first letter of
    the next, which must be the first letter of exactly one earlier token; stop on a (letter, digit) pair."""
    n, length = tokens.shape
    rows = np.arange(n)
    is_pair_of_letters = tokens >= LETTER_FIRST_PAIR_ID
    in_range = tokens < len(vocabulary("letter"))
    letter_region = np.arange(length) >= length - QUERY_BLOCK
    _flag(problem, reasons, ~in_range.all(axis=1) | (tokens == 0).any(axis=1), "token id is padding or out of range")
    _flag(
        problem,
        reasons,
        (is_pair_of_letters != letter_region).any(axis=1),
        f"the last {QUERY_BLOCK} tokens must be letter-letter pairs and all earlier ones letter-digit pairs",
    )

    first, second = _letter_parts(tokens)

    current = np.full(n, length - 1)
    hops = np.zeros(n, dtype=np.int64)
    path = np.full((n, QUERY_BLOCK), -1, dtype=np.int64)
    positions = np.arange(length)
    for step in range(QUERY_BLOCK):  # a chain cannot revisit a letter, so it stops within the 9 letter pairs
        jumping = is_pair_of_letters[rows, current] & (problem < 0)
        if not jumping.any():
            break
        wanted = second[rows, current]
        candidates = (first == wanted[:, None]) & (positions < current[:, None])
        count = candidates.sum(axis=1)
        _flag(
            problem,
            reasons,
            jumping & (count != 1),
            "the letter a hop names is the first letter of none or several earlier tokens (not proper)",
        )
        jumping &= problem < 0
        current = np.where(jumping, candidates.argmax(axis=1), current)
        path[jumping, step] = current[jumping]
        hops += jumping
    return hops, current, path


def _flag(problem: np.ndarray, reasons: list[str], bad: np.ndarray, reason: str) -> None:
    """Record ``reason`` for the samples in ``bad`` that have no problem yet."""
    if bad.any():
        if reason not in reasons:
            reasons.append(reason)
        problem[bad & (problem < 0)] = reasons.index(reason)


def _follow(data: TaskData):
    problem = np.full(len(data), -1)
    reasons: list[str] = []
    follower = _follow_number if data.task == "number" else _follow_letter
    hops, end, path = follower(data.tokens, problem, reasons)
    return hops, end, path, problem, reasons


def validate(data: TaskData) -> None:
    """Re-follow every sample's hop chain from the query and check label, hop count and target position.

    Raises ``ValueError`` naming the first bad sample and why. Works at any length, so extended data
    (:func:`extend`) is checked the same way.
    """
    hops, end, _, problem, reasons = _follow(data)
    rows = np.arange(len(data))
    ok = problem < 0
    _flag(problem, reasons, ok & ~np.isin(data.hops, HOP_LENS), "hop count outside 1..4")
    _flag(problem, reasons, ok & (hops != data.hops), "the chain takes a different number of hops than recorded")
    _flag(problem, reasons, ok & (end != data.target_pos), "the chain ends at a different position than recorded")
    _flag(
        problem, reasons, ok & (data.tokens[rows, end] != data.labels), "the label is not the token the chain reaches"
    )
    bad = np.flatnonzero(problem >= 0)
    if bad.size:
        first_bad = int(bad[0])
        raise ValueError(f"{data.task} sample {first_bad}: {reasons[problem[first_bad]]} ({bad.size} bad samples)")


def chain_positions(data: TaskData) -> np.ndarray:
    """(N, 4) positions each hop lands on, in hop order, padded with -1; the last one is the answer's.

    Useful for analyses that look at the hop targets (e.g. multi-query scores, spec §A6). Call
    :func:`validate` first: ill-formed samples get whatever positions were reached.
    """
    return _follow(data)[2][:, : max(HOP_LENS)]


# -------------------------------------------------------------------------------------- length extension


def extend(data: TaskData, extra: int, seed: int) -> TaskData:
    """Prepend ``extra`` filler tokens (spec §A10.1): the target window grows at the front, the pre-target
    window, the query, the hop structure and the answer are untouched, and ``target_pos`` moves by ``extra``.

    Fillers (PROPOSED in the spec): Number, uniform letters of the 120-letter vocabulary; Letter, (letter,
    digit 1..8) pairs whose letter is none of the sample's chain letters, so the input stays proper and the
    answer unique. Deterministic given ``seed``.
    """
    if extra < 0:
        raise ValueError("extra must be ≥ 0")
    draw = np.random.default_rng(seed)
    n = len(data)
    if data.task == "number":
        fillers = NUMBER_FIRST_LETTER_ID + draw.integers(0, len(NUMBER_LETTERS), size=(n, extra))
    else:
        n_letters = len(LETTER_LETTERS)
        path = chain_positions(data)
        rows, steps = np.nonzero(path >= 0)
        on_chain = np.zeros((n, n_letters), dtype=bool)
        on_chain[rows, _letter_parts(data.tokens[rows, path[rows, steps]])[0]] = True
        # allowed letters first (ascending), then a uniform pick among the first `allowed` of them
        allowed_letters = np.argsort(on_chain, axis=1, kind="stable")
        allowed = n_letters - on_chain.sum(axis=1)
        pick = np.floor(draw.random((n, extra)) * allowed[:, None]).astype(np.int64)
        letters = np.take_along_axis(allowed_letters, pick, axis=1)
        fillers = _letter_digit_id(letters, draw.integers(1, len(LETTER_DIGITS) + 1, size=(n, extra)))
    return TaskData(
        task=data.task,
        tokens=np.concatenate([fillers.astype(np.uint8), data.tokens], axis=1),
        labels=data.labels.copy(),
        hops=data.hops.copy(),
        target_pos=(data.target_pos + extra).astype(np.int32),
    )


def hop_balanced_rows(task: str, n: int, split_size: int, seed: int) -> np.ndarray:
    """Indices of the first ``n / 4`` samples of each hop count in the given split, in split order."""
    if n % len(HOP_LENS):
        raise ValueError(f"n = {n} must be a multiple of {len(HOP_LENS)} to balance over hops")
    hops = _unpack(task, balancing_table(task, split_size, seed))["hops"]
    per_hop = n // len(HOP_LENS)
    chosen = [np.flatnonzero(hops == h)[:per_hop] for h in HOP_LENS]
    if any(len(rows) < per_hop for rows in chosen):
        raise ValueError(f"the split has fewer than {per_hop} samples of some hop count")
    return np.sort(np.concatenate(chosen))


def length_extension_set(task: str, n: int, extra: int, seed: int, base_seed: int = DEFAULT_BASE_SEED) -> TaskData:
    """``n`` test samples, exactly balanced over hops, with ``extra`` fillers prepended (spec §A10.1).

    The base samples are the first ``n / 4`` of each hop count in the test split of ``base_seed``, so every
    length is measured on the same samples and only the fillers (from ``seed``) differ.
    """
    size = SPLITS["test"][0]
    seed_of_test = split_seed("test", base_seed)
    base = generate_rows(task, size, seed_of_test, hop_balanced_rows(task, n, size, seed_of_test))
    return extend(base, extra, seed)
