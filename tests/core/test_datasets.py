"""Tests of posym.data.datasets: round trip, determinism on disk, and refusal of damaged or foreign files."""

import json

import numpy as np
import pytest
import torch

from posym.data import datasets, tasks
from posym.data.files import IntegrityError, read_json, save_tensors, sha256_file, write_json
from posym.studies.a.tasks import PAPER_ORDER, get
from posym.data.tasks import TaskData


def config(n=500, seed=11, split="val", **extra):
    return {"n": n, "seed": seed, "split": split, **extra}


@pytest.fixture(params=PAPER_ORDER)
def saved(request, tmp_path):
    data = get(request.param).samples(500, 11)
    tensors_path, metadata_path = datasets.save_split(tmp_path / request.param / "val", data, config())
    return data, tensors_path, metadata_path


def test_round_trip(saved):
    data, tensors_path, metadata_path = saved
    assert tensors_path.name == "val.safetensors" and metadata_path.name == "val.json"
    for given in (tensors_path, metadata_path, tensors_path.with_suffix("")):
        loaded = datasets.load_split(given)
        assert loaded.task == data.task
        for name in data.all_arrays():
            assert getattr(loaded, name).dtype == getattr(data, name).dtype
            assert np.array_equal(getattr(loaded, name), getattr(data, name))


def test_metadata_records_what_made_the_split(saved):
    data, tensors_path, metadata_path = saved
    meta = read_json(metadata_path)
    assert meta["task"] == data.task and list(meta["sets"]) == ["val"]
    assert meta["sets"]["val"]["n_samples"] == 500 and meta["sets"]["val"]["seq_len"] == 17
    assert meta["vocab"] == list(get(data.task).vocabulary.tokens)
    assert meta["generator"] == config()
    assert meta["sha256"] == sha256_file(tensors_path)
    assert meta["sets"]["val"]["arrays"]["tokens"] == {"shape": [500, 17], "dtype": "uint8"}
    assert meta["sets"]["val"]["arrays"]["target_pos"] == {"shape": [500], "dtype": "int32"}
    assert meta["posym_version"]
    assert datasets.load_splits(tensors_path).keys() == {"val"}


def test_directory_target_uses_the_split_name(tmp_path):
    data = get("number").samples(50, 1)
    tensors_path, _ = datasets.save_split(tmp_path, data, config(n=50, seed=1, split="test"))
    assert tensors_path == tmp_path / "test.safetensors"
    with pytest.raises(ValueError):
        datasets.save_split(tmp_path, data, {"n": 50})


def test_same_seed_same_bytes_different_seed_different_bytes(tmp_path):
    for task in PAPER_ORDER:
        paths = [
            datasets.save_split(tmp_path / f"{task}_{i}", get(task).samples(800, seed), config(800, seed))[0]
            for i, seed in enumerate((5, 5, 6))
        ]
        digests = [sha256_file(p) for p in paths]
        assert digests[0] == digests[1] != digests[2]


def test_extended_split_round_trip(tmp_path):
    data = get("letter").length_extension_set(200, extra=120, seed=3, base_seed=42)
    datasets.save_split(tmp_path / "len120.safetensors", data, {"n": 200, "seed": 3, "extra": 120})
    loaded = datasets.load_split(tmp_path / "len120")
    assert loaded.tokens.shape == (200, 137) and np.array_equal(loaded.tokens, data.tokens)
    assert datasets.load_splits(tmp_path / "len120.json").keys() == {"len120"}  # named after the file


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_several_lengths_in_one_file(tmp_path, task):
    sets = {f"extra{x}": get(task).length_extension_set(100, extra=x, seed=1, base_seed=42) for x in (0, 10, 250)}
    tensors_path, _ = datasets.save_splits(tmp_path / "length.safetensors", sets, {"samples": 100, "seed": 1})
    loaded = datasets.load_splits(tensors_path)
    assert list(loaded) == list(sets)
    for name, data in sets.items():
        assert loaded[name].seq_len == data.seq_len
        assert all(np.array_equal(getattr(loaded[name], k), getattr(data, k)) for k in data.all_arrays())
    with pytest.raises(ValueError, match="3 sets"):
        datasets.load_split(tensors_path)
    with pytest.raises(ValueError, match="one task"):
        datasets.save_splits(
            tmp_path / "mixed",
            {"a": sets["extra0"], "b": get("number" if task == "letter" else "letter").samples(10, 1)},
            {},
        )


def test_save_refuses_invalid_data(tmp_path):
    data = get("number").samples(50, 1)
    data.labels[3] ^= 1
    with pytest.raises(ValueError, match="sample 3"):
        datasets.save_split(tmp_path / "bad", data, config(50, 1))
    assert not list(tmp_path.iterdir())


# ------------------------------------------------------------------------------------------ damage


def test_truncated_tensors_file_is_refused(saved):
    _, tensors_path, _ = saved
    content = tensors_path.read_bytes()
    tensors_path.write_bytes(content[: len(content) // 2])
    with pytest.raises(IntegrityError, match="sha256") as err:
        datasets.load_split(tensors_path)
    assert err.value.path == tensors_path


def test_flipped_byte_is_refused(saved):
    _, tensors_path, _ = saved
    content = bytearray(tensors_path.read_bytes())
    content[-7] ^= 0x01
    tensors_path.write_bytes(bytes(content))
    with pytest.raises(IntegrityError) as err:
        datasets.load_split(tensors_path)
    assert err.value.path == tensors_path and str(tensors_path) in str(err.value)


def test_missing_files_are_refused(saved):
    _, tensors_path, metadata_path = saved
    metadata_path.unlink()
    with pytest.raises(IntegrityError, match="missing") as err:
        datasets.load_split(tensors_path)
    assert err.value.path == metadata_path


def test_missing_tensors_file_is_refused(saved):
    _, tensors_path, metadata_path = saved
    tensors_path.unlink()
    with pytest.raises(IntegrityError, match="missing") as err:
        datasets.load_split(metadata_path)
    assert err.value.path == tensors_path


def test_garbled_json_is_refused(saved):
    _, _, metadata_path = saved
    metadata_path.write_text("{not json")
    with pytest.raises(IntegrityError) as err:
        datasets.load_split(metadata_path)
    assert err.value.path == metadata_path


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda m: m["vocab"].__setitem__(5, "x"), "vocabulary differs"),
        (lambda m: m.__setitem__("task", "digits"), "unknown task"),
        (lambda m: m.pop("sha256"), "missing sha256"),
        (lambda m: m.__setitem__("sha256", "0" * 64), "does not match"),
        (lambda m: m["sets"]["val"]["arrays"]["tokens"].__setitem__("shape", [1, 17]), "the record says"),
        (lambda m: m["sets"].__setitem__("other", m["sets"]["val"]), "the record implies"),
        (lambda m: m.__setitem__("format_version", 99), "format"),
    ],
)
def test_record_that_does_not_match_is_refused(saved, edit, message):
    _, tensors_path, metadata_path = saved
    meta = json.loads(metadata_path.read_text())
    edit(meta)
    metadata_path.write_text(json.dumps(meta))
    with pytest.raises(IntegrityError, match=message) as err:
        datasets.load_split(tensors_path)
    assert err.value.path in (metadata_path, tensors_path)


def test_consistent_but_wrong_content_is_refused(tmp_path):
    """A file whose record matches but whose chains do not lead to the labels (e.g. written by other code)."""
    data = get("letter").samples(100, 2)
    tensors_path, metadata_path = datasets.save_split(tmp_path / "s", data, config(100, 2))
    arrays = {f"val/{k}": torch.from_numpy(v.copy()) for k, v in data.all_arrays().items()}
    arrays["val/labels"][17] ^= 1
    meta = read_json(metadata_path)
    meta["sha256"] = save_tensors(tensors_path, arrays)
    write_json(metadata_path, meta)
    with pytest.raises(IntegrityError, match="sample 17") as err:
        datasets.load_split(tensors_path)
    assert err.value.path == tensors_path
    assert datasets.load_split(tensors_path, check_answers=False).labels[17] == data.labels[17] ^ 1


def test_wrong_dtype_is_refused(tmp_path):
    data = get("number").samples(100, 2)
    tensors_path, metadata_path = datasets.save_split(tmp_path / "s", data, config(100, 2))
    arrays = {f"val/{k}": torch.from_numpy(v.copy()) for k, v in data.all_arrays().items()}
    arrays["val/tokens"] = arrays["val/tokens"].to(torch.int64)
    meta = read_json(metadata_path)
    meta["sha256"] = save_tensors(tensors_path, arrays)
    meta["sets"]["val"]["arrays"]["tokens"]["dtype"] = "int64"
    write_json(metadata_path, meta)
    with pytest.raises(IntegrityError, match="expects uint8"):
        datasets.load_split(tensors_path)


def test_no_pickle_anywhere_in_the_data_layer():
    import inspect

    for module in (datasets, tasks):
        source = inspect.getsource(module)
        for forbidden in ("import pickle", "pickle.load", "allow_pickle", "torch.load", "np.load"):
            assert forbidden not in source, (module.__name__, forbidden)
