"""The length-protocol study (issue 29): Fig 5B's inputs under each filler rule, and its table, distances and finding."""

import numpy as np
import pandas as pd
import pytest

from conftest import model_config
from posym.nn.gptj import PosymModel
from posym.pipeline import config
from posym.studies.a import length_protocol
from posym.studies.a.length_generalisation import paper_accuracy
from posym.studies.a.tasks import PAPER_ORDER, get, letter, multihop
from posym.training.evaluate import accuracy, predict

pytestmark = pytest.mark.usefixtures("one_torch_thread")

EXTRA = 300  # enough draws per sample to see every allowed token a rule can draw
RULES = list(multihop.FILLER_RULES)


@pytest.fixture(scope="module")
def base():
    return {task: get(task).length_base_set(200, base_seed=42) for task in PAPER_ORDER}


def window_tokens(data):
    return data.tokens[:, : data.seq_len - multihop.QUERY_BLOCK].astype(np.int64)


@pytest.mark.parametrize("task", PAPER_ORDER)
@pytest.mark.parametrize("rule", RULES)
def test_every_rule_keeps_the_input_proper(base, task, rule):
    """Only the prefix differs: the answer, the window, the chain and the hop count are the base sample's."""
    data = base[task]
    longer = get(task).extend(data, EXTRA, seed=7, rule=rule)
    get(task).validate(longer)  # the chain from the query still ends on the answer, uniquely
    assert np.array_equal(longer.tokens[:, EXTRA:], data.tokens)
    assert np.array_equal(longer.labels, data.labels) and np.array_equal(longer.hops, data.hops)
    assert np.array_equal(longer.target_pos, data.target_pos + EXTRA)
    prefix = longer.tokens[:, :EXTRA].astype(np.int64)
    pool = get(task).filler_pool(data)
    assert np.take_along_axis(pool, prefix, axis=1).all()  # every filler is a proper one
    if task == "letter":  # no filler starts with a letter the chain visits
        chain = get(task).chain_letters(data)
        assert not np.take_along_axis(chain, letter.parts_of(prefix)[0], axis=1).any()


def test_uniform_is_the_rule_fig_5b_sets_were_made_with(base):
    """The default keeps the bytes of every length set made before the rules existed: the tasks' own draws."""
    for task, data in base.items():
        default = get(task).extend(data, 40, seed=3)
        uniform = get(task).uniform_fillers(data, 40, np.random.default_rng(3))
        assert multihop.DEFAULT_FILLER == "uniform"
        assert np.array_equal(default.tokens[:, :40], uniform)


def test_a_fixed_filler_is_one_token_per_sample(base):
    for task, data in base.items():
        prefix = get(task).extend(data, 50, seed=4, rule="fixed").tokens[:, :50]
        assert (prefix == prefix[:, :1]).all()  # one token, repeated
        assert len(np.unique(prefix[:, 0])) > 10  # drawn per sample, not one token for every sample


def test_outside_window_excludes_the_window_and_in_window_draws_only_from_it(base):
    for task, data in base.items():
        window = window_tokens(data)
        outside = get(task).extend(data, EXTRA, seed=5, rule="outside-window").tokens[:, :EXTRA].astype(np.int64)
        inside = get(task).extend(data, EXTRA, seed=5, rule="in-window").tokens[:, :EXTRA].astype(np.int64)
        for row in range(len(data)):
            assert not set(outside[row]) & set(window[row])
            assert set(inside[row]) <= set(window[row])
        if task == "number":  # every window letter is a proper filler, the answer too
            assert all(set(inside[r]) == set(window[r]) for r in range(len(data)))
            assert (inside == data.labels[:, None]).any(axis=1).all()
        else:  # the answer pair starts with a chain letter: never a filler
            assert not (inside == data.labels[:, None]).any()
        uniform = get(task).extend(data, EXTRA, seed=5).tokens[:, :EXTRA].astype(np.int64)
        assert any(set(uniform[r]) & set(window[r]) for r in range(len(data)))  # what outside-window takes away


def test_rules_are_deterministic_in_seed(base):
    data = base["letter"]
    for rule in RULES:
        a, b, c = (get("letter").extend(data, 30, seed=s, rule=rule).tokens for s in (1, 1, 2))
        assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_an_unknown_rule_is_an_error_naming_it(base):
    with pytest.raises(ValueError, match="unknown filler rule 'random'.*outside-window"):
        get("number").extend(base["number"], 5, seed=0, rule="random")


def test_the_schema_offers_exactly_the_rules():
    properties = config.load_schema()["properties"]["a"]["properties"]
    assert properties["length"]["properties"]["filler"]["enum"] == RULES
    assert properties["length_protocol"]["properties"]["fillers"]["items"]["enum"] == RULES
    defaults = config.study_defaults("a")
    assert defaults["length"]["filler"] == multihop.DEFAULT_FILLER
    assert defaults["length_protocol"]["fillers"] == RULES


# ------------------------------------------------------------------------------------------ the measurement


@pytest.fixture(scope="module")
def model():
    return PosymModel(model_config(len(get("number").vocabulary), n_layer=2, d_model=32)).initialise([3]).eval()


def test_protocol_accuracy_covers_every_rule_and_length_and_its_uniform_rows_are_fig_5b(model):
    frame = length_protocol.protocol_accuracy(model, "number", RULES, [0, 30], samples=32, data_seed=42)
    assert frame[["filler", "extra_tokens", "length"]].drop_duplicates().values.tolist() == [
        [rule, x, 17 + x] for rule in RULES for x in (0, 30)
    ]
    assert len(frame) == len(RULES) * 2 * 5 and (frame.loc[frame["hop"] == "all", "n"] == 32).all()
    # Fig 5B's set at +30 (posym a length-data): the same base samples and filler stream
    fig5b = get("number").length_extension_set(32, 30, multihop.filler_seed(42, 30), base_seed=42)
    expected = accuracy(predict(model, fig5b.tokens), fig5b)
    got = frame[(frame["filler"] == "uniform") & (frame["extra_tokens"] == 30)]
    assert got["accuracy"].tolist() == [r["accuracy"] for r in expected]
    with pytest.raises(ValueError, match="length_protocol.fillers: unknown rule 'pad'"):
        length_protocol.protocol_accuracy(model, "number", ["pad"], [0], samples=4, data_seed=42)
    with pytest.raises(ValueError, match="length_protocol.samples: 6 is not a multiple of 4"):
        length_protocol.protocol_accuracy(model, "number", RULES, [0], samples=6, data_seed=42)


def synthetic(offsets: dict[str, float], lengths=(0, 40, 100, 300), seeds=(0, 1)) -> pd.DataFrame:
    """Number curves lying ``offset`` below Fig 5B per rule, the two seeds ±0.02 around it (hop 'all' and hop 1)."""
    rows = []
    for rule, offset in offsets.items():
        for seed in seeds:
            for x in lengths:
                value = float(paper_accuracy("number", [x])[0]) - offset + (0.02 if seed else -0.02)
                rows += [
                    {"task": "number", "seed": seed, "filler": rule, "extra_tokens": x, "hop": hop, "accuracy": value, "n": 8}
                    for hop in ("1", "all")
                ]
    return pd.DataFrame(rows)


def test_distances_rank_the_rules_by_mean_gap_and_name_the_closest():
    frame = synthetic({"uniform": 0.4, "outside-window": 0.3, "in-window": 0.6, "fixed": 0.1})
    distances = length_protocol.protocol_distances(frame)
    assert distances["filler"].tolist() == RULES
    assert distances["mean |gap|"].tolist() == pytest.approx([0.4, 0.3, 0.6, 0.1])
    assert distances["gap at +100"].tolist() == pytest.approx([-0.4, -0.3, -0.6, -0.1])
    assert distances["rank"].tolist() == [3, 2, 4, 1] and distances["closest"].tolist() == [False, False, False, True]
    assert (distances["lengths"] == 4).all() and (distances["seeds"] == 2).all()
    finding = length_protocol.closest_finding(distances)
    assert finding["closest"].tolist() == ["fixed"]
    assert finding["finding"][0].startswith("number: of 4 filler rules, fixed comes closest to Fig 5B (mean |ours − paper| 0.100")
    assert finding["finding"][0].endswith("; the others: outside-window 0.300, uniform 0.400, in-window 0.600.")
    assert "gap at +100 -0.100" in finding["finding"][0]


def test_tied_rules_are_all_named_closest():
    distances = length_protocol.protocol_distances(synthetic({"uniform": 0.2, "outside-window": 0.2, "fixed": 0.5}))
    assert distances["closest"].tolist() == [True, True, False]
    (sentence,) = length_protocol.closest_finding(distances)["finding"]
    assert "uniform and outside-window come closest" in sentence and sentence.endswith("the others: fixed 0.500.")


def test_the_gap_at_100_is_interpolated_when_100_is_not_measured():
    distances = length_protocol.protocol_distances(synthetic({"uniform": 0.2}, lengths=(60, 200)))
    assert distances["at +100"].tolist() == ["interpolated"]
    ours = np.interp(100, [60, 200], paper_accuracy("number", [60, 200]) - 0.2)
    assert distances["gap at +100"][0] == pytest.approx(ours - 0.74)


def test_the_table_is_rules_by_lengths_with_the_paper_row():
    table = length_protocol.protocol_table(synthetic({"fixed": 0.1, "uniform": 0.4}))
    assert table.columns.tolist() == ["task", "filler", "+0", "+40", "+100", "+300"]
    assert table["filler"].tolist() == ["uniform", "fixed", "paper (Fig 5B)"]  # the rules in FILLER_RULES' order
    assert table.iloc[2, 2:].tolist() == pytest.approx([0.996, 0.94, 0.74, 0.47])
    assert table.iloc[0, 2:].tolist() == pytest.approx([0.596, 0.54, 0.34, 0.07])  # mean over the two seeds
