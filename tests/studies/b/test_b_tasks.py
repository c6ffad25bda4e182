"""Tests of paper B's tasks (spec §B2): vocabulary, layout, determinism, labels checked by counters of their own,
label laws, the trigger-filler switch, the answer checkers, the ignored count 0, the registry and storage."""

from collections import Counter

import numpy as np
import pytest

from posym.data import datasets, tasks
from posym.studies.b.tasks import PAPER_ORDER, get
from posym.data.tasks import PAD

WORDS_PER_SENTENCE = 120
SPECIALS = [PAD, "[UNK]", "[CLS]", "[SEP]", "[MASK]"]


def make(name, n=3000, seed=42, split="train", **options):
    return get(name).generate(split, n, seed, options)


def sentences(task, data):
    """Each sample's words as strings, padding dropped (checked to be a tail elsewhere)."""
    return [[w for w in task.vocabulary.decode(row) if w != PAD] for row in data.tokens]


@pytest.fixture(scope="module")
def distance():
    return make("distance", 20_000)


@pytest.fixture(scope="module")
def count():
    return make("count", 20_000)


def test_vocabulary_is_574_tokens_with_padding_first():
    for name in PAPER_ORDER:
        tokens = get(name).vocabulary.tokens
        assert len(tokens) == 574
        assert list(tokens[:5]) == SPECIALS and tokens[0] == PAD
        assert tokens[5:] == tuple(f"w{k:03d}" for k in range(569))
    assert get("distance").vocabulary == get("count").vocabulary


@pytest.mark.parametrize("name", PAPER_ORDER)
def test_shapes_dtypes_and_right_padding(name, distance, count):
    data, _ = {"distance": distance, "count": count}[name]
    assert data.tokens.shape == (20_000, 128) and data.tokens.dtype == np.uint16
    assert data.labels.shape == (20_000,) and data.labels.dtype == np.uint8
    assert set(data.arrays) == ({"trigger_pos"} if name == "distance" else set())
    words = data.tokens != 0
    length = words.sum(axis=1)
    assert np.array_equal(words, np.arange(128)[None, :] < length[:, None])  # padding is exactly the tail
    assert data.tokens[words].min() >= 5 and data.tokens.max() < 574  # sentences hold words only
    if name == "count":
        assert (length == WORDS_PER_SENTENCE).all()
    else:
        assert length.max() == WORDS_PER_SENTENCE and length.min() >= 5  # cut at 120; 1 + w1 + 1 + w2 + 1 at least


@pytest.mark.parametrize("name", PAPER_ORDER)
def test_deterministic_per_seed_and_split(name):
    first, record = make(name, 5000, seed=7)
    again, _ = make(name, 5000, seed=7)
    for key, array in first.all_arrays().items():
        assert array.tobytes() == again.all_arrays()[key].tobytes()
    assert record == {"seed": 7, "stream": [7, PAPER_ORDER.index(name), 0], "triggers": list(get(name).triggers), "length": 128,
                      **({"exclude_trigger_fillers": False} if name == "distance" else {})}  # fmt: skip
    other_seed, _ = make(name, 5000, seed=8)
    test_split, test_record = make(name, 5000, seed=7, split="test")
    assert first.tokens.tobytes() != other_seed.tokens.tobytes()
    assert first.tokens.tobytes() != test_split.tokens.tobytes()
    assert test_record["triggers"] == record["triggers"]  # train and test share the triggers
    # the first samples of a split do not depend on its size, so a head is made alone
    head = get(name).head("train", 5000, 7, 10)
    assert np.array_equal(head.tokens, first.tokens[:10]) and np.array_equal(head.labels, first.labels[:10])
    empty, _ = make(name, 0)
    assert empty.tokens.shape == (0, 128)
    with pytest.raises(ValueError):
        make(name, 5, split="dev")


def test_distance_labels_by_an_own_counter(distance):
    data, record = distance
    w1, w2 = record["triggers"]
    task = get("distance")
    n_unique = 0
    for row, (words, label, p1) in enumerate(zip(sentences(task, data), data.labels, data.trigger_pos)):
        label, p1 = int(label), int(p1)
        assert words[p1] == w1 and words[p1 + label] == w2
        left, middle, right = words[:p1], words[p1 + 1 : p1 + label], words[p1 + label + 1 :]
        assert 1 <= len(left) <= 25 and 1 <= len(right) <= 25 and len(middle) == label - 1
        for segment in (left, middle, right):  # drawn without replacement within a segment
            assert len(set(segment)) == len(segment)
        if words.count(w1) == 1 and words.count(w2) == 1:  # unambiguous: the label is the distance itself
            assert label == words.index(w2) - words.index(w1)
            n_unique += 1
    assert n_unique > 0.7 * len(data)


def test_count_labels_by_an_own_counter(count):
    data, record = count
    triggers = set(record["triggers"])
    assert len(triggers) == 30
    own = [sum(word in triggers for word in words) for words in sentences(get("count"), data)]
    assert np.array_equal(np.array(own), data.labels)


def test_label_ranges_and_uniformity(distance, count):
    expected_range = {"distance": (2, 71), "count": (0, 100)}
    for name, (data, _) in (("distance", distance), ("count", count)):
        low, high = expected_range[name]
        labels = data.labels.astype(int)
        assert labels.min() == low and labels.max() == high
        freq = np.bincount(labels, minlength=high + 1)[low:]
        mean = len(labels) / (high - low + 1)
        assert (np.abs(freq - mean) < 6 * np.sqrt(mean)).all()  # each value about equally often
    side = np.bincount(distance[0].trigger_pos)[1:]  # the left segment's length, U{1..25}
    assert len(side) == 25 and (np.abs(side - 800) < 6 * np.sqrt(800)).all()


def test_trigger_fillers_switch():
    task = get("distance")
    extra = lambda data: np.isin(data.tokens, task.trigger_ids).sum(axis=1) > 2  # noqa: E731
    default, record = make("distance", 5000)
    assert record["exclude_trigger_fillers"] is False
    assert 0.1 < extra(default).mean() < 0.3  # the authors' fillers: about a fifth carry another trigger
    excluded, record = make("distance", 5000, exclude_trigger_fillers=True)
    assert record["exclude_trigger_fillers"] is True
    assert not extra(excluded).any()
    assert np.array_equal(excluded.labels, default.labels)  # same stream: only the fillers differ
    task.validate(excluded)
    with pytest.raises(ValueError, match="exclude_trigger_fillers"):
        make("distance", 10, exclude_trigger_fillers="yes")
    assert make("count", 10, exclude_trigger_fillers=True)[1] == make("count", 10)[1]  # count ignores it


def corrupted(data, labels=None, tokens=None):
    labels = data.labels.copy() if labels is None else labels
    tokens = data.tokens.copy() if tokens is None else tokens
    return tasks.TaskData(data.task, tokens, labels, {k: v.copy() for k, v in data.arrays.items()})


def test_validate_catches_corruption():
    for name in PAPER_ORDER:
        task, (data, _) = get(name), make(name, 200)
        task.validate(data)
        labels = data.labels.copy()
        labels[17] += 1
        with pytest.raises(ValueError, match=f"{name} sample 17:"):
            task.validate(corrupted(data, labels=labels))
        tokens = data.tokens.copy()
        tokens[23, 125] = 9  # a word in the padding
        with pytest.raises(ValueError, match=f"{name} sample 23: the padding"):
            task.validate(corrupted(data, tokens=tokens))
        tokens = data.tokens.copy()
        tokens[31, 3] = 0  # padding inside the sentence
        with pytest.raises(ValueError, match=f"{name} sample 31:"):
            task.validate(corrupted(data, tokens=tokens))
    data, _ = make("distance", 200)
    tokens = data.tokens.copy()
    tokens[5, data.trigger_pos[5]] = 6  # w1 replaced
    with pytest.raises(ValueError, match="distance sample 5: no w173"):
        get("distance").validate(corrupted(data, tokens=tokens))
    data, _ = make("count", 200)
    tokens = data.tokens.copy()
    row = int(np.flatnonzero(data.labels > 0)[0])
    column = int(np.flatnonzero(np.isin(tokens[row], get("count").trigger_ids))[0])
    tokens[row, column] = next(i for i in range(5, 574) if i not in get("count").trigger_ids)  # one trigger fewer
    with pytest.raises(ValueError, match=f"count sample {row}: the label is not the number"):
        get("count").validate(corrupted(data, tokens=tokens))


def test_count_accuracy_ignores_count_zero(count):
    data, _ = count
    task = get("count")
    assert task.ignored_label == 0
    zero = data.labels == 0
    assert zero.any()
    predictions = np.where(zero, 50, data.labels)  # wrong exactly on the ignored samples
    (row,) = task.accuracy_rows(predictions, data)
    assert row == {"accuracy": 1.0, "n": int((~zero).sum())}
    assert get("distance").ignored_label is None


def test_label_text_is_the_number():
    assert get("distance").label_text(np.uint8(17)) == "17" and get("count").label_text(0) == "0"


def test_registry_finds_both_tasks_in_study_b():
    registry = tasks.registry()
    for name in PAPER_ORDER:
        assert registry[name].study == "b" and registry[name] is get(name)
    with pytest.raises(ValueError, match="not a task of paper B"):
        get("number")
    assert not set(get("distance").triggers) & set(get("count").triggers)


@pytest.mark.parametrize("name", PAPER_ORDER)
def test_round_trip_on_disk(tmp_path, name):
    data, record = make(name, 500, seed=3, split="test")
    generator = {"split": "test", "n": 500, "base_seed": 3, **record}
    tensors_path, metadata_path = datasets.save_split(tmp_path / name, data, generator)
    loaded = datasets.load_split(tensors_path)  # runs the answer checker
    assert loaded.task == name
    for key, array in data.all_arrays().items():
        assert getattr(loaded, key).dtype == array.dtype and np.array_equal(getattr(loaded, key), array)
    assert datasets.load_metadata(metadata_path)["generator"]["triggers"] == list(get(name).triggers)
    assert Counter(datasets.load_metadata(metadata_path)["vocab"][:5]) == Counter(SPECIALS)


@pytest.mark.parametrize("name", ["distance", "count"])
def test_a_shorter_task_scales_every_size(name):
    task = get(name)
    data, record = task.generate("train", 2000, 7, {"length": 48})
    assert data.tokens.shape == (2000, 48) and record["length"] == 48
    task.validate(data)  # the checks read the shape from the tokens' width
    words = (data.tokens != 0).sum(1)
    if name == "distance":  # sides 1..9, between 1..26 (25 and 70 scaled by 48 / 128), sentence at most 45
        assert data.labels.min() == 2 and data.labels.max() == 27 and words.max() <= 45
        assert data.trigger_pos.max() == 9
    else:  # 45 words, counts 0..38
        assert (words == 45).all() and data.labels.max() == 38
    with pytest.raises(ValueError, match="length"):
        task.generate("train", 10, 7, {"length": 8})
