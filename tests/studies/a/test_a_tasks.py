"""Paper A's tasks (posym.studies.a.tasks): vocabularies, faithfulness to the authors' generators, validation,
length extension, and the registry that finds them."""

import functools
import hashlib
from collections import Counter

import numpy as np
import pytest

from posym.pipeline import config
from posym.data import tasks
from posym.studies.a.tasks import PAPER_ORDER, get, letter, multihop, number
from posym.data.tasks import TaskData

PAPER_DATA = config.study_defaults("a")["data"]
TRAIN_N, TEST_N, VAL_N = (PAPER_DATA[f"{s}_samples"] for s in ("train", "test", "val"))
SEED = 42


def sha256(array: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(array).tobytes()).hexdigest()


# Regression oracle. Every hash below was obtained by running the authors' own generators
# (SequenceMultiHopDatasetGenerator / SequenceSymbolicDatasetGenerator from jcalataiut-cli/CENIA at commit
# 53de17a, Position_symbolic_dynamics/code/src/data/) with num_leafs=8, context_len=16, hop_lens=[1,2,3,4],
# vocab_size=120 (Number) / 8 (Letter), encoding each sample's full_seq and label with their own tokenizers
# (SequenceMultiHopTokenizer(16, 120), SequenceSymbolicTokenizer(8, 8)) and hashing the uint8 id arrays
# (tokens row-major (N, 17), labels (N,)). Our generator reproduced every one of them byte for byte.
AUTHORS_SHA256 = {
    # first 2,000 samples of the train split (432,000 samples, seed 42)
    ("number", "train_head_tokens"): "a56ba35e678007226b81b91f2304163122bd5dc6ef571f69143cabeca61776f0",
    ("number", "train_head_labels"): "47a5a6d6a0c28d8da7262f088b7ee8004e1b54a788bce25d096963e1fdc40d08",
    ("letter", "train_head_tokens"): "48dbc7aa08abc48f4443376395c4c423973f06c9c84be42cbf3c246e5c2c7554",
    ("letter", "train_head_labels"): "597a9aadbb7ff152e6916afe6ee32a1f8d73d74df32694104a31116b5e4895d4",
    # whole train split (432,000 samples, seed 42)
    ("number", "train_tokens"): "85ba1056c9784b6f374afb68fd37949216a939a32e8f75654e60fd70b700f991",
    ("number", "train_labels"): "6867e52ee8a41d14b345def020fa8d66d0b59d0d7474626be681a6ec3cd5e5ca",
    ("letter", "train_tokens"): "7eb268148540ea5c30ed6a782c7331a08f4dd91ea9d03c160be4c95ce620d2ff",
    ("letter", "train_labels"): "c143d4e15c900097a7fa08549ab9f3dea5f3156e1f1e21be9d1f4307c8a2a58b",
    # whole test split (45,600 samples, seed 42 + 434,400) and val split (2,400 samples, seed 42 + 432,000)
    ("number", "test_tokens"): "3af00091478c844aae3f94b8f0e02e1775aecf8b952a38e1520d8d4e160400a8",
    ("letter", "test_tokens"): "ef65525d71b5f4e3c9457cba80ea81057d245aee96f37f4b6af356bda5ae95ff",
    ("number", "val_tokens"): "bf9f6f9cb788e1c494b7f58578de32e72bdc704fb6893f1327c31842fac90ee3",
    ("letter", "val_tokens"): "308b442a3f54d5abf07ac19afa4bfcff9ee0c09a9d9de994a4a8fb2369393613",
}


@functools.cache
def full_test_split(task: str) -> TaskData:
    data = get(task).generate_split("test", SEED, TEST_N)
    assert len(data) == TEST_N
    return data


@pytest.fixture(params=PAPER_ORDER)
def test_split(request):
    return full_test_split(request.param)


# ------------------------------------------------------------------------------------------ vocabularies


def test_number_vocabulary_layout():
    vocab = get("number").vocabulary
    assert len(vocab) == 137
    assert vocab.tokens[0] == "<pad>"
    assert [vocab.index(str(k)) for k in (1, 9, 16)] == [1, 9, 16]
    assert [vocab.index(t) for t in ("a", "z", "aa", "az", "ba", "dp")] == [17, 42, 43, 68, 69, 136]
    assert "dq" not in vocab.tokens and "aA" not in vocab.tokens  # lowercase bigrams, cut at 120
    assert len(set(vocab.tokens)) == len(vocab)


def test_letter_vocabulary_layout():
    vocab = get("letter").vocabulary
    assert len(vocab) == 129
    assert [vocab.index(t) for t in ("a1", "a8", "b1", "h8", "aa", "ah", "ba", "hh")] == [1, 8, 9, 64, 65, 72, 73, 128]
    with pytest.raises(KeyError):
        vocab.index("a9")


def test_decode_round_trip():
    for task in PAPER_ORDER:
        vocab = get(task).vocabulary
        assert get(task).vocabulary.decode(np.arange(len(vocab))) == list(vocab.tokens)


# ------------------------------------------------------------------------------- faithfulness (oracle)


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_train_head_matches_authors_generator(task):
    head = get(task).generate_rows(TRAIN_N, SEED, np.arange(2000))
    assert sha256(head.tokens) == AUTHORS_SHA256[task, "train_head_tokens"]
    assert sha256(head.labels) == AUTHORS_SHA256[task, "train_head_labels"]


def test_test_split_matches_authors_generator(test_split):
    assert sha256(test_split.tokens) == AUTHORS_SHA256[test_split.task, "test_tokens"]


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_val_split_matches_authors_generator(task):
    assert sha256(get(task).generate_split("val", SEED, VAL_N).tokens) == AUTHORS_SHA256[task, "val_tokens"]


def test_hand_checked_number_sample():
    # The authors' generator prints sample 0 of the seed-42 train split as
    # "ah aa ck cd dd aa ay d 3 1 4 1 2 4 10 12 3", label "aa", hop_seq [-1, 13, 9, 8, 5].
    # By hand: the query (position 16) says 3 -> position 13 says 4 -> 9 says 1 -> 8 says 3 -> 5 = "aa": 4 hops.
    sample = get("number").generate_sample(TRAIN_N, SEED, 0)
    assert " ".join(get("number").vocabulary.decode(sample.tokens[0])) == "ah aa ck cd dd aa ay d 3 1 4 1 2 4 10 12 3"
    assert get("number").vocabulary.decode(sample.labels) == ["aa"]
    assert (sample.hops[0], sample.target_pos[0]) == (4, 5)
    assert get(sample.task).chain_positions(sample)[0, :4].tolist() == [13, 9, 8, 5]


def test_hand_checked_letter_sample():
    # The authors' generator prints sample 0 of the seed-42 train split as
    # "g5 d7 b5 b7 g5 f6 c4 b2 bb ac fh ff gg gg ef eh ea", label ('c', '4'), hop_seq [-1, 9, 6].
    # By hand: the query "ea" names "a" -> the only earlier token starting with a is "ac" (position 9), which
    # names "c" -> the only earlier token starting with c is "c4" (position 6): 2 hops.
    sample = get("letter").generate_sample(TRAIN_N, SEED, 0)
    assert " ".join(get("letter").vocabulary.decode(sample.tokens[0])) == "g5 d7 b5 b7 g5 f6 c4 b2 bb ac fh ff gg gg ef eh ea"
    assert get("letter").vocabulary.decode(sample.labels) == ["c4"]
    assert (sample.hops[0], sample.target_pos[0]) == (2, 6)
    assert get(sample.task).chain_positions(sample)[0, :3].tolist() == [9, 6, -1]


def test_number_back_pointer_replay_equals_numpy_randint(monkeypatch):
    """The fast replay of NumPy's bounded draws equals ``randint`` itself, also when it runs out of outputs."""
    seeds = np.arange(5_000, 8_000)
    expected = np.zeros((len(seeds), multihop.SEQ_LEN), dtype=np.int64)
    for row, seed in enumerate(seeds):
        np.random.seed(seed)
        expected[row, 1:] = np.random.randint(0, np.arange(1, multihop.SEQ_LEN + 1))[:-1]
    for raw_draws in (number.RAW_DRAWS, 18):  # 18 outputs: most samples need more and take the fallback
        bit_generator = np.random.MT19937()
        legacy = np.random.RandomState(bit_generator)
        raw = np.empty((len(seeds), raw_draws), dtype=np.uint64)
        for row, seed in enumerate(seeds):
            legacy.seed(int(seed))
            raw[row] = bit_generator.random_raw(raw_draws)
        assert np.array_equal(number.back_pointers(raw, seeds), expected)
    monkeypatch.setattr(number, "RAW_DRAWS", 18)
    assert (
        sha256(get("number").generate_rows(TRAIN_N, SEED, np.arange(2000)).tokens)
        == AUTHORS_SHA256["number", "train_head_tokens"]
    )


# ------------------------------------------------------------------------------- whole-split semantics


def assert_balanced(data: TaskData, n_combinations: int) -> None:
    """Every answer combination appears floor(N/C) or floor(N/C)+1 times, exactly N mod C of them the latter."""
    # the label id encodes the letter (Number) or the (letter, digit) pair (Letter)
    counts = Counter(zip(data.target_pos.tolist(), data.labels.tolist(), data.hops.tolist()))
    n = len(data)
    assert len(counts) == n_combinations
    assert set(counts.values()) <= {n // n_combinations, n // n_combinations + 1}
    assert sum(c == n // n_combinations + 1 for c in counts.values()) == n % n_combinations
    # answers sit in the target window, hops are 1..4, labels are target-window tokens
    assert set(np.unique(data.hops).tolist()) == set(multihop.HOP_LENS)
    assert data.target_pos.min() >= 0 and data.target_pos.max() < multihop.WINDOW


COMBINATIONS = {"number": 8 * 120 * 4, "letter": 8 * 8 * 8 * 4}


def test_test_split_is_valid_and_balanced(test_split):
    get(test_split.task).validate(test_split)
    assert_balanced(test_split, COMBINATIONS[test_split.task])
    assert test_split.tokens.shape == (TEST_N, multihop.SEQ_LEN) and test_split.tokens.dtype == np.uint8


def test_letter_chain_letters_start_exactly_one_token():
    """Spec §A2: a chain letter is the first letter of its own hop position only, in the whole sequence."""
    data = full_test_split("letter")
    first, _ = letter.parts_of(data.tokens)
    path = get(data.task).chain_positions(data)
    rows, steps = np.nonzero(path >= 0)
    chain_letter = first[rows, path[rows, steps]]
    assert np.all((first[rows] == chain_letter[:, None]).sum(axis=1) == 1)


def test_number_filler_offsets_cover_their_range():
    """Offsets at position i are drawn from 1..i (spec §A2); all values occur at every position."""
    data = full_test_split("number")
    for position in range(multihop.WINDOW, multihop.SEQ_LEN):
        assert set(np.unique(data.tokens[:, position]).tolist()) == set(range(1, position + 1))


@pytest.mark.slow
@pytest.mark.parametrize("task", PAPER_ORDER)
def test_full_train_split(task):
    """The whole 432,000-sample train split: the authors' bytes, valid, balanced (432,000 = 112.5 x 3840 for
    Number, 210.9375 x 2048 for Letter), and sample-wise regenerable. About 12 s per task."""
    train = get(task).generate_split("train", SEED, TRAIN_N)
    assert sha256(train.tokens) == AUTHORS_SHA256[task, "train_tokens"]
    assert sha256(train.labels) == AUTHORS_SHA256[task, "train_labels"]
    get(train.task).validate(train)
    assert_balanced(train, COMBINATIONS[task])
    for idx in (0, 1, 123_457, TRAIN_N - 1):
        sample = get(task).generate_sample(TRAIN_N, SEED, idx)
        for name in get(task).dtypes:
            assert np.array_equal(getattr(sample, name)[0], getattr(train, name)[idx])


def test_per_sample_regeneration_equals_split_rows(test_split):
    for idx in (0, 1, 4_999, 31_337, TEST_N - 1):
        sample = get(test_split.task).generate_sample(TEST_N, multihop.split_seed("test", SEED), idx)
        for name in get(test_split.task).dtypes:
            assert np.array_equal(getattr(sample, name)[0], getattr(test_split, name)[idx]), (idx, name)
    rows = np.array([40_000, 7, 39_999, 45_000])  # out of order, across chunk boundaries
    picked = get(test_split.task).generate_rows(TEST_N, multihop.split_seed("test", SEED), rows)
    assert np.array_equal(picked.tokens, test_split.tokens[rows])


def test_determinism_and_seed_sensitivity():
    for task in PAPER_ORDER:
        a, b = get(task).samples(3000, 7), get(task).samples(3000, 7)
        c = get(task).samples(3000, 8)
        assert all(np.array_equal(getattr(a, k), getattr(b, k)) for k in a.all_arrays())
        assert not np.array_equal(a.tokens, c.tokens)
        get(c.task).validate(c)


def test_split_seeds_follow_the_spec():
    assert [multihop.split_seed(s, 42) for s in ("train", "val", "test")] == [42, 432_042, 434_442]
    small = get("letter").generate_split("val", SEED, size=100)
    assert np.array_equal(small.tokens, get("letter").samples(100, 432_042).tokens)


def test_bad_arguments():
    with pytest.raises(ValueError):
        get("digits").vocabulary
    with pytest.raises(IndexError):
        get("number").generate_sample(10, 0, 10)
    with pytest.raises(ValueError):
        get("number").samples(10, -1)


# -------------------------------------------------------------------------------------------- validate


@pytest.fixture(scope="module")
def small_sets():
    return {task: get(task).samples(2000, 1234) for task in PAPER_ORDER}


def mutated(data: TaskData, **changes) -> TaskData:
    arrays = {name: array.copy() for name, array in data.all_arrays().items()}
    for name, (row, column, value) in changes.items():
        if column is None:
            arrays[name][row] = value
        else:
            arrays[name][row, column] = value
    return TaskData(data.task, arrays.pop("tokens"), arrays.pop("labels"), arrays)


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_validate_names_the_first_bad_sample(small_sets, task):
    data = small_sets[task]
    bad = mutated(data, labels=(9, None, data.labels[9] ^ 1))
    bad.labels[4] ^= 1  # two bad rows: the first, 4, is reported
    with pytest.raises(ValueError, match=r"sample 4: the label"):
        get(bad.task).validate(bad)
    with pytest.raises(ValueError, match=r"sample 11: .*number of hops"):
        get(data.task).validate(mutated(data, hops=(11, None, data.hops[11] % 4 + 1)))
    with pytest.raises(ValueError, match=r"sample 12: .*ends at a different position"):
        get(data.task).validate(mutated(data, target_pos=(12, None, (data.target_pos[12] + 1) % 8)))
    with pytest.raises(ValueError, match=r"sample 3: token id is padding"):
        get(data.task).validate(mutated(data, tokens=(3, 10, 0)))


def test_validate_number_specific_errors(small_sets):
    data = small_sets["number"]
    with pytest.raises(ValueError, match=r"sample 7: an offset jumps before the start"):
        get(data.task).validate(mutated(data, tokens=(7, 8, 9)))  # position 8 cannot go back 9
    with pytest.raises(ValueError, match=r"sample 5: the last 9 tokens must be offsets"):
        get(data.task).validate(mutated(data, tokens=(5, 12, 30)))  # a letter among the offsets
    with pytest.raises(ValueError, match=r"sample 6: the last 9 tokens must be offsets"):
        get(data.task).validate(mutated(data, tokens=(6, 2, 3)))  # an offset in the target window


def test_validate_letter_rejects_improper_inputs(small_sets):
    data = small_sets["letter"]
    row = 8
    target = int(data.target_pos[row])
    other = (target + 1) % multihop.WINDOW
    duplicate = letter.letter_digit_id(letter.parts_of(data.labels[row])[0], 1)  # answer letter, digit 1
    with pytest.raises(ValueError, match=r"sample 8: .*not proper"):
        get(data.task).validate(mutated(data, tokens=(row, other, duplicate)))
    with pytest.raises(ValueError, match=r"sample 2: the last 9 tokens must be letter-letter"):
        get(data.task).validate(mutated(data, tokens=(2, 16, 5)))


def test_validate_is_fast_enough(test_split):
    import time

    start = time.perf_counter()
    for _ in range(5):
        get(test_split.task).validate(test_split)
    assert (time.perf_counter() - start) / 5 < 1.0  # 45,600 samples take ~0.1 s; a train split ~10x that


# ----------------------------------------------------------------------------------- length extension


@pytest.mark.parametrize("extra", [0, 1, 37, 500])
def test_extend_keeps_structure_and_answer(small_sets, extra):
    for task, data in small_sets.items():
        longer = get(data.task).extend(data, extra, seed=5)
        get(longer.task).validate(longer)
        assert longer.tokens.shape == (len(data), multihop.SEQ_LEN + extra)
        assert np.array_equal(longer.tokens[:, extra:], data.tokens)
        assert np.array_equal(longer.labels, data.labels) and np.array_equal(longer.hops, data.hops)
        assert np.array_equal(longer.target_pos, data.target_pos + extra)
        assert np.array_equal(longer.tokens[np.arange(len(data)), longer.target_pos], data.labels)
        chains = get(longer.task).chain_positions(longer)
        assert np.array_equal(chains[chains >= 0], (get(data.task).chain_positions(data) + extra)[chains >= 0])
        fillers = longer.tokens[:, :extra].astype(np.int64)
        if task == "number":
            assert fillers.size == 0 or (fillers.min() >= 17 and fillers.max() <= 136)
        else:
            assert fillers.size == 0 or (fillers.min() >= 1 and fillers.max() <= 64)  # (letter, digit) pairs


def test_extend_letter_fillers_avoid_chain_letters_and_are_uniform(small_sets):
    data = small_sets["letter"]
    longer = get(data.task).extend(data, 300, seed=2)
    first, _ = letter.parts_of(longer.tokens)
    path = get(longer.task).chain_positions(longer)
    for row in range(0, len(data), 97):
        chain_letters = set(first[row, path[row][path[row] >= 0]].tolist())
        filler_letters = set(first[row, :300].tolist())
        assert not filler_letters & chain_letters
        assert filler_letters == set(range(8)) - chain_letters  # 300 draws cover all allowed letters
    digits = (longer.tokens[:, :300].astype(np.int64) - 1) % 8 + 1
    assert set(np.unique(digits).tolist()) == set(range(1, 9))


def test_extend_is_deterministic_in_seed(small_sets):
    for data in small_sets.values():
        a, b, c = (get(data.task).extend(data, 50, seed=s) for s in (3, 3, 4))
        assert np.array_equal(a.tokens, b.tokens) and not np.array_equal(a.tokens, c.tokens)


def test_length_extension_set_is_hop_balanced_and_shares_base_samples():
    for task in PAPER_ORDER:
        short = get(task).length_extension_set(1000, extra=0, seed=0, base_seed=SEED)
        long = get(task).length_extension_set(1000, extra=1000, seed=0, base_seed=SEED)
        assert Counter(short.hops.tolist()) == {1: 250, 2: 250, 3: 250, 4: 250}
        assert np.array_equal(long.tokens[:, 1000:], short.tokens)
        get(long.task).validate(long)
        rows = get(task).hop_balanced_rows(1000, TEST_N, multihop.split_seed("test", SEED))
        assert np.array_equal(
            short.tokens[:5], get(task).generate_rows(TEST_N, multihop.split_seed("test", SEED), rows[:5]).tokens
        )
    with pytest.raises(ValueError):
        get("number").length_extension_set(1001, extra=0, seed=0, base_seed=SEED)


# ------------------------------------------------------------------------------------------- registry


def test_the_registry_finds_paper_a_tasks_in_their_study_folder():
    registered = {name: task for name, task in tasks.registry().items() if task.study == "a"}
    assert set(registered) == set(PAPER_ORDER)
    schema_tasks = config.load_schema()["properties"]["a"]["properties"]["tasks"]["items"]["enum"]
    assert list(PAPER_ORDER) == schema_tasks  # the config accepts exactly paper A's tasks, in the paper's order
    with pytest.raises(ValueError, match="unknown task 'colour'"):
        tasks.get("colour")


def test_constants_that_must_equal_schema_defaults():
    # The length sets take their base samples from the paper-size test split, whatever data.test_samples is.
    assert multihop.PAPER_TEST_SAMPLES == PAPER_DATA["test_samples"]
    # The val and test seeds follow the samples of the splits before them at the paper's sizes (spec §A2).
    assert multihop.SPLIT_SEED_OFFSETS == {"train": 0, "val": TRAIN_N, "test": TRAIN_N + VAL_N}
