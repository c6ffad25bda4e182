"""RoPE frequency use (spec §A7, claim A-4): plane frequencies, per-plane max logit, weighted ID, Table 1 checks."""

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import model_config
from posym.nn.gptj import PosymModel
from posym.pipeline import config
from posym.studies.a import paper
from posym.studies.a import rope_frequency as frequency
from posym.studies.a.tasks import PAPER_ORDER, get
from posym.data.tasks import TaskData

A4 = config.study_defaults("a")["claims"]["a4"]  # claim A-4's bands, the spec's


def test_frequency_ids_are_1_indexed_as_in_table1():
    assert frequency.id_frequency(1) == 1.0
    assert round(float(frequency.id_frequency(2)), 4) == 0.8660
    assert round(float(frequency.id_frequency(10)), 4) == 0.2738
    assert round(float(frequency.id_frequency(42)), 4) == 0.0027
    table = paper.TABLE1
    assert np.allclose(frequency.id_frequency(table["id"]), table["frequency"], atol=5e-5)


def test_the_models_rope_turns_plane_k_by_g_k_per_position():
    """Through the model's own hook: a sequence of one repeated token has the same pre-RoPE query at every
    position, so plane k (dims 2k−2, 2k−1) of the post-RoPE query at position p is position 0's turned by p·g_k."""
    model = PosymModel(model_config(5, n_layer=1)).initialise([0]).eval()
    q = model.run_with_cache(torch.full((1, 20), 3), ["blocks.0.attn.hook_rot_q"])["blocks.0.attn.hook_rot_q"][0, 0, 0]
    planes = torch.view_as_complex(q.double().reshape(20, 64, 2).contiguous())
    use = frequency.frequency_use(model, np.full((1, 20), 3), "test")
    for k in (1, 2, 10, 42, 64):
        g_k = 10000 ** (-2 * (k - 1) / 128)
        turned = planes[:, k - 1] / planes[0, k - 1]
        expected = torch.exp(1j * g_k * torch.arange(20, dtype=torch.float64))
        assert torch.allclose(turned, expected, atol=1e-4)
        assert use.loc[use["id"] == k, "frequency"].item() == pytest.approx(g_k, rel=1e-6)


def test_weighted_id_on_synthetic_curves():
    u = np.zeros(64)
    assert frequency.weighted_id(u) == pytest.approx(32.5)
    u[1] = 50.0
    assert frequency.weighted_id(u) == pytest.approx(2.0, abs=1e-12)
    u[3] = 50.0
    assert frequency.weighted_id(u) == pytest.approx(3.0, abs=1e-12)
    # temperature 1 on the raw values: a peak of 2 above a flat floor barely moves ID* from the middle
    flat = np.zeros(64)
    flat[0] = 2.0
    assert 28 < frequency.weighted_id(flat) < 32.5


def one_plane_model(plane_id: int, layers: int = 2) -> PosymModel:
    """A model whose queries and keys live on RoPE plane ``plane_id`` (1-indexed) alone, in every layer."""
    model = PosymModel(model_config(12, n_layer=layers, d_model=16)).initialise([1]).eval()
    generator = torch.Generator().manual_seed(2)
    dims = slice(2 * plane_id - 2, 2 * plane_id)
    with torch.no_grad():
        for block in model.blocks:
            projection = 3.0 * torch.randn(2, 16, generator=generator)
            block.q_weight.zero_()
            block.k_weight.zero_()
            block.q_weight[0, dims] = projection
            block.k_weight[0, dims] = projection
    return model


@pytest.mark.parametrize("plane_id", [1, 3, 8])
def test_frequency_analysis_recovers_the_plane_a_hand_built_model_uses(plane_id):
    model = one_plane_model(plane_id)
    tokens = np.random.default_rng(0).integers(1, 12, size=(40, 17))
    use = frequency.frequency_use(model, tokens, "test")
    assert len(use) == 2 * 8  # layers x planes (head dim 16)
    assert (use.loc[use["id"] != plane_id, "use"] == 0).all()
    ids = frequency.weighted_ids(use)
    assert ids["id"].tolist() == [plane_id, plane_id]
    assert np.allclose(ids["weighted_id"], plane_id, atol=0.05)


def test_max_plane_logits_are_the_largest_plane_share_of_the_logit():
    """The per-plane contributions of one key add up to its unscaled logit (hook_attn_scores × √d_head)."""
    model = PosymModel(model_config(12, n_layer=1, d_model=16)).initialise([4]).eval()
    tokens = np.random.default_rng(1).integers(1, 12, size=(3, 9))
    u = frequency.max_plane_logits(model, tokens)  # (N, L, H, P)
    cache = model.run_with_cache(
        torch.as_tensor(tokens), ["blocks.0.attn.hook_rot_q", "blocks.0.attn.hook_rot_k", "blocks.0.attn.hook_attn_scores"]
    )
    q, k = cache["blocks.0.attn.hook_rot_q"][0, :, 0, -1], cache["blocks.0.attn.hook_rot_k"][0, :, 0]
    shares = (q[:, None, :] * k).reshape(3, 9, 8, 2).sum(-1)  # (N, keys, planes)
    assert torch.allclose(shares.sum(-1), cache["blocks.0.attn.hook_attn_scores"][0, :, 0, -1] * 4.0, atol=1e-5)
    assert np.allclose(u[:, 0, 0], shares.amax(dim=1).numpy(), atol=1e-6)


def test_the_fig3_inputs_are_valid_samples():
    for task, (label, hops, target) in {"number": ("n", 4, 2), "letter": ("a2", 3, 4)}.items():
        ids = frequency.example_tokens(task).astype(np.uint8)
        labels = np.array([get(task).vocabulary.index(label)], dtype=np.uint8)
        arrays = {"hops": np.array([hops], dtype=np.uint8), "target_pos": np.array([target], dtype=np.int32)}
        data = TaskData(task, ids, labels, arrays)
        get(data.task).validate(data)


# ---------------------------------------------------------------------------------------- Table 1, A-4


def synthetic_use(task: str, seed: int, ids_by_layer: list[int]) -> pd.DataFrame:
    """Frequency use whose softmax-weighted ID is ``ids_by_layer[layer]`` (one sharp peak per layer)."""
    rows = []
    for layer, peak in enumerate(ids_by_layer):
        for plane in range(1, 65):
            rows.append(
                {
                    "inputs": "test",
                    "layer": layer,
                    "head": 0,
                    "id": plane,
                    "frequency": float(frequency.id_frequency(plane)),
                    "use": 60.0 * (plane == peak),
                }
            )
    return pd.DataFrame(rows).assign(task=task, seed=seed)


PAPER_IDS = {task: paper.TABLE1[paper.TABLE1["task"] == task]["id"].tolist() for task in PAPER_ORDER}


def test_table1_matches_the_paper_when_the_curves_do():
    use = pd.concat([synthetic_use(task, 0, PAPER_IDS[task]) for task in PAPER_ORDER])
    table = frequency.table1(use)
    assert (table["ID (per seed)"].astype(int) == table["paper ID"]).all()
    assert np.allclose(table["frequency"], table["paper frequency"], atol=5e-5)


PLANES = np.arange(1, 65)


def per_input_use(centres: list[float | None], inputs: int = 30, height: float = 8.0, noise: float = 0.5, seed: int = 0) -> np.ndarray:
    """u per input, shape (inputs, layers, 1, 64): per layer a hump of ``height`` on the plane ``centre`` (width 2
    planes) with independent noise per input and plane; a centre of None is a flat curve (noise only)."""
    rng = np.random.default_rng(seed)
    curves = [np.zeros(64) if c is None else height * np.exp(-((PLANES - c) ** 2) / 8.0) for c in centres]
    return np.stack(curves)[None, :, None, :] + noise * rng.standard_normal((inputs, len(centres), 1, 64))


def measured_use(task: str, seed: int, per_input: np.ndarray) -> pd.DataFrame:
    """The frequency-use rows the frequency job would write for these u values (posym's own table code)."""
    return frequency.use_table(per_input, frequency.id_frequency(PLANES), "test").assign(task=task, seed=seed)


def paper_like_use(task: str, seed: int, centres: list[float | None] | None = None) -> pd.DataFrame:
    return measured_use(task, seed, per_input_use(centres or PAPER_IDS[task], seed=seed))


def test_flat_curve_null_is_deterministic_and_a_single_value_for_a_flat_curve():
    values = per_input_use([38.0], inputs=20)[:, 0, 0]
    first, again = frequency.flat_curve_null(values), frequency.flat_curve_null(values)
    assert len(first) == frequency.NULL_PERMUTATIONS and np.array_equal(first, again)
    assert not np.array_equal(first, frequency.flat_curve_null(values, seed=1))
    assert np.allclose(frequency.flat_curve_null(np.full((20, 64), 3.0)), 32.5)
    low, high = frequency.null_interval(np.arange(101.0))
    assert (low, high) == pytest.approx((1.0, 99.0))


def test_a_consistent_peak_lies_outside_the_null_and_shuffled_inputs_do_not():
    """A head that peaks on the same plane on input after input is separated; the same values with each input's
    planes shuffled (no preference, same logit scale) are not."""
    values = per_input_use([2.0], height=60.0, noise=1.0)[:, 0, 0]
    low, _ = frequency.null_interval(frequency.flat_curve_null(values))
    assert frequency.weighted_id(values.mean(axis=0)) < low
    shuffled = np.random.default_rng(5).permuted(values, axis=-1)
    low, high = frequency.null_interval(frequency.flat_curve_null(shuffled))
    assert low <= frequency.weighted_id(shuffled.mean(axis=0)) <= high


def test_small_logits_give_a_narrow_null_that_an_inert_head_lies_in():
    inert = per_input_use([None], noise=0.05)[:, 0, 0]
    low, high = frequency.null_interval(frequency.flat_curve_null(inert))
    assert 32.0 < low < high < 33.0
    assert low <= frequency.weighted_id(inert.mean(axis=0)) <= high


def test_a_flat_curve_fails_the_low_frequency_check_although_its_id_is_at_least_30():
    flat = measured_use("number", 0, np.ones((30, 12, 1, 64)))
    row = frequency.claim_a4(flat, [0], A4).set_index("check").loc["number layers 5–11: ID ≥ 30, above a flat curve"]
    assert row["verdict"] == "fail"
    assert row["measured"].startswith("L5 32, L6 32") and "not separated from a flat curve: L5 (ID* 32.5, null 32.5–32.5)" in row["measured"]
    assert "Table 1" in row["source"] and "§A12" in row["source"]


def test_inert_heads_near_32_5_fail_the_low_frequency_check():
    use = measured_use("letter", 0, per_input_use([18.0] + [None] * 11, noise=0.05))
    table = frequency.separation_table(use).set_index("layer")
    assert (table.loc[1:, "round(ID*)"].between(32, 33)).all()  # ID ≥ 30 would pass them all
    # pure noise lands beyond the 99 % quantile on 1 % of layers; the check needs every layer beyond it
    assert (table.loc[1:, "ID* vs flat-curve null"] == "within").sum() >= 9
    verdict = frequency.claim_a4(use, [0], A4).set_index("check")["verdict"]
    assert verdict["letter layers 1–11: ID ≥ 30, above a flat curve"] == "fail"
    assert verdict["letter layer 0: 10 ≤ ID ≤ 30, below a flat curve"] == "pass"


def test_a_clear_low_frequency_preference_passes_and_the_table_shows_each_layer():
    use = paper_like_use("number", 0)
    table = frequency.separation_table(use)
    assert list(table.columns) == [
        "task", "seed", "layer", "ID*", "round(ID*)", "peak ID", "max u", "null 1 %", "null 99 %", "ID* vs flat-curve null"
    ]
    assert table["peak ID"].tolist() == PAPER_IDS["number"] and (table["max u"] > 7).all()
    verdict = frequency.claim_a4(use, [0], A4).set_index("check")["verdict"]
    assert verdict["number layers 5–11: ID ≥ 30, above a flat curve"] == "pass"
    assert verdict["number layers 0–3: ID ≤ 3, below a flat curve"] == "pass"


def test_claim_a4_per_seed_and_over_seeds():
    number_bad = list(PAPER_IDS["number"])
    number_bad[1] = 20  # a positional layer on a slow frequency
    use = pd.concat(
        [
            paper_like_use("number", 0),
            paper_like_use("letter", 0),
            paper_like_use("number", 1, number_bad),
            paper_like_use("letter", 1),
        ]
    )
    claims = frequency.claim_a4(use, [0, 1], A4)
    assert (claims["source"].str.len() > 0).all()
    verdict = claims.set_index(["check", "seed"])["verdict"]
    positional, intermediate = "number layers 0–3: ID ≤ 3, below a flat curve", "letter layer 0: 10 ≤ ID ≤ 30, below a flat curve"
    assert verdict[(positional, "0")] == "pass"
    assert verdict[(positional, "1")] == "fail"
    measured = claims.set_index(["check", "seed"])["measured"]
    assert verdict[(positional, "all")] == "fail"
    assert measured[(positional, "all")].startswith("1 of 2 seeds pass; ")
    assert verdict[(intermediate, "all")] == "pass"
    assert measured[(intermediate, "all")].startswith("2 of 2 seeds pass; ")
    assert measured[("number layers 5–11: ID ≥ 30, above a flat curve", "all")].startswith("2 of 2 seeds pass; ")
    # the distance to Table 1: the mean ID* over the check's layers against the paper's mean ID over them (1, 2, 2, 2)
    distance = claims.set_index(["check", "seed"])
    assert distance.loc[(positional, "0"), "paper"] == 1.75
    assert distance.loc[(positional, "1"), "ours"] > distance.loc[(positional, "0"), "ours"] + 3  # layer 1 at ID 20
    assert distance.loc[(positional, "all"), "ours"] == (distance.loc[(positional, "0"), "ours"] + distance.loc[(positional, "1"), "ours"]) / 2
    # Table 1's Letter L1 is ID 32, the flat curve's value: a head that peaks there is not separated from it
    letter = measured[("letter layers 1–11: ID ≥ 30, above a flat curve", "0")]
    assert verdict[("letter layers 1–11: ID ≥ 30, above a flat curve", "0")] == "fail"
    assert "not separated from a flat curve: L1 (ID* 32." in letter and "L2" not in letter.split(";")[1]


def test_claim_a4_leave_missing_layers_and_tasks_untested():
    use = paper_like_use("number", 0, [1, 2])  # a two-layer Number model only
    verdict = frequency.claim_a4(use, [0], A4).set_index(["check", "seed"])["verdict"]
    assert verdict[("number layers 0–3: ID ≤ 3, below a flat curve", "0")] == "pass"
    assert verdict[("number layers 5–11: ID ≥ 30, above a flat curve", "0")] == "not tested"
    assert verdict[("letter layer 0: 10 ≤ ID ≤ 30, below a flat curve", "0")] == "not tested"


def test_claim_a4_on_a_table_without_the_null_judge_only_what_the_band_decides():
    use = synthetic_use("number", 0, [1, 20, 2, 2] + [38] * 8)  # written before the null columns existed
    table = frequency.claim_a4(use, [0], A4).set_index("check")
    assert table.loc["number layers 0–3: ID ≤ 3, below a flat curve", "verdict"] == "fail"  # L1 is out of the band
    assert table.loc["number layers 5–11: ID ≥ 30, above a flat curve", "verdict"] == "not tested"
    assert "no flat-curve null" in table.loc["number layers 5–11: ID ≥ 30, above a flat curve", "measured"]


def test_claim_a4_bands_are_the_schemas():
    use = synthetic_use("number", 0, [1, 20, 2, 2] + [38] * 8)
    wider = {**A4, "positional_max_id": 20, "symbolic_min_id": 40}
    table = frequency.claim_a4(use, [0], wider).set_index("check")
    assert table.loc["number layers 0–3: ID ≤ 20, below a flat curve", "verdict"] == "not tested"  # in the band; no null to judge
    assert table.loc["number layers 5–11: ID ≥ 40, above a flat curve", "verdict"] == "fail"  # 38 is out of it
    assert "letter layer 0: 10 ≤ ID ≤ 30, below a flat curve" in frequency.claim_a4(use, [0], A4)["check"].tolist()


def test_a_nope_model_is_refused():
    model = PosymModel(model_config(12, n_layer=1, d_model=16, position="nope")).initialise([0])
    with pytest.raises(ValueError, match="RoPE"):
        frequency.max_plane_logits(model, np.ones((1, 5), dtype=np.int64))
