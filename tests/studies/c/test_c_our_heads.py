"""posym's own question on paper A's heads (studies/c/our_heads.py): the LayerNorm gain folded into M against the
model's own attention scores, the verdict table, the notebook's condition on study a, and the jobs on the tiny
pipeline's trained runs (studies [a, c])."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F

from conftest import CONFIG_MATRIX, model_config, planned_jobs, snakemake
from posym.pipeline import config, study
from posym.studies.c import qk_fingerprint as qk
from posym.studies.c import our_heads as oh

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _model(n_head: int, d_model: int, ln_bias: bool, seed: int = 0):
    """A random posym model with LayerNorm gains away from 1 (and biases, when asked) and weights large enough that
    the scores are far from zero."""
    torch.manual_seed(seed)
    model = model_config(23, n_layer=2, d_model=d_model, n_head=n_head).build().initialise([seed]).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.ln_weight.copy_(1 + 0.4 * torch.randn_like(block.ln_weight))
            block.ln_bias.copy_(0.3 * torch.randn_like(block.ln_bias) if ln_bias else torch.zeros_like(block.ln_bias))
            block.in_weight.mul_(8)
    return model


def _diagonal_scores(model, ids):
    """Per layer: the ln-normalised residual n (B, T, d) and the model's own score of each position for itself
    (B, H, T), where RoPE cancels (query = key position), from the hook points."""
    names = [f"blocks.{l}.{n}" for l in range(model.config.n_layer) for n in ("hook_resid_pre", "attn.hook_attn_scores")]
    cache = model.run_with_cache(ids, names)
    out = []
    for layer in range(model.config.n_layer):
        resid = cache[f"blocks.{layer}.hook_resid_pre"][0]
        n = F.layer_norm(resid, (resid.shape[-1],), eps=model.config.layer_norm_epsilon).double().numpy()
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0].double().numpy()
        out.append((n, np.diagonal(scores, axis1=-2, axis2=-1)))
    return out


@pytest.mark.parametrize("n_head, d_model", [(1, 32), (4, 32)], ids=["one head as wide as the model", "four heads"])
def test_the_folded_form_is_the_models_own_score_where_rope_cancels(n_head, d_model):
    model = _model(n_head, d_model, ln_bias=False)
    ids = torch.randint(0, 23, (3, 11), generator=torch.Generator().manual_seed(1))
    d_head = d_model // n_head
    for layer, (n, diagonal) in enumerate(_diagonal_scores(model, ids)):
        weights = oh.block_weights(model, layer)
        for head, (W_Q, W_K) in enumerate(oh.folded_weights(weights["q"], weights["k"], weights["gain"], n_head)):
            M_eff = W_Q @ W_K.T
            centre = qk.centring(d_model)
            assert np.allclose(M_eff, centre @ np.diag(weights["gain"]) @ weights["q"][head * d_head : (head + 1) * d_head].T
                               @ weights["k"][head * d_head : (head + 1) * d_head] @ np.diag(weights["gain"]) @ centre)  # fmt: skip
            predicted = np.einsum("btd,de,bte->bt", n, M_eff, n) / np.sqrt(d_head)
            model_score = diagonal[:, head]
            assert np.abs(predicted - model_score).max() <= 1e-5 * np.abs(model_score).max()
            unfolded = np.einsum("btd,de,bte->bt", n, weights["q"][head * d_head : (head + 1) * d_head].T @ weights["k"][head * d_head : (head + 1) * d_head], n)
            assert np.abs(unfolded / np.sqrt(d_head) - model_score).max() > 1e-2 * np.abs(model_score).max()  # the gain matters
    error, share = oh.fold_check(model, ids)
    assert error < 1e-5 and share == 0.0


def test_the_ln_bias_terms_are_what_folding_the_gain_leaves_out():
    model = _model(1, 32, ln_bias=True)
    ids = torch.randint(0, 23, (3, 11), generator=torch.Generator().manual_seed(2))
    error, share = oh.fold_check(model, ids)  # M_eff plus the β terms: the model's score
    assert error < 1e-5 and 0.05 < share < 1.0
    (n, diagonal), *_ = _diagonal_scores(model, ids)
    weights = oh.block_weights(model, 0)
    (W_Q, W_K), = oh.folded_weights(weights["q"], weights["k"], weights["gain"], 1)
    gain_only = np.einsum("btd,de,bte->bt", n, W_Q @ W_K.T, n) / np.sqrt(32)
    assert np.abs(gain_only - diagonal[:, 0]).max() > 1e-3 * np.abs(diagonal).max()


def test_a_head_as_wide_as_the_model_has_rank_d_minus_one_and_a_centred_null():
    model = _model(1, 32, ln_bias=False)
    settings = {"seed": 0, "null_draws": 20, "placebo_permutations": 4}
    (row,) = oh.head_rows(oh.block_weights(model, 1), 1, 1, 32, 10000.0, settings)
    assert row["rank"] == 31  # the centring removes the mean direction
    assert 0 < row["dir_frac_null_mean"] < 1 and row["dir_frac_null_sd"] > 0 and np.isfinite(row["D_head_z"])
    assert 0 <= row["rope_imag_frac"] <= 1 and 0 <= row["rope_imag_frac_placebo"] <= 1
    # the placebo permutes rotary columns alike in W_Q and W_K: M and its fingerprint stay, the RoPE split moves
    W_Q, W_K = oh.folded_weights(*(oh.block_weights(model, 1)[k] for k in ("q", "k", "gain")), 1)[0]
    order = np.random.default_rng(0).permutation(32)
    assert np.allclose(W_Q @ W_K.T, W_Q[:, order] @ W_K[:, order].T)


def _frame(positional_rope: float, symbolic_rope: float, kinds=("positional", "symbolic")) -> pd.DataFrame:
    rows = []
    for seed in range(3):
        for layer, kind in enumerate(kinds * 2):
            value = positional_rope if kind == "positional" else symbolic_rope
            rows.append({"task": "number", "seed": seed, "step": 100, "final": True, "layer": layer, "head": 0, "kind": kind,
                         "rope_imag_frac": value + 0.01 * layer, "hi_freq_dir": 0.5, "dir_frac": 0.6, "D_head": 0.5})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_verdict_can_pass_fail_or_go_untested():
    check = "the prediction: rope_imag_frac of positional heads > of symbolic heads"
    # 0.5 against 0.485: a higher median (0.510 vs 0.505), but the classes overlap over their layers: not significant
    cases = ((_frame(0.7, 0.4), "pass"), (_frame(0.3, 0.5), "fail"), (_frame(0.5, 0.485), "fail"), (_frame(0.7, 0.4, ("symbolic", "mixed")), "not tested"))
    for frame, expected in cases:
        table = oh.verdicts(frame)
        assert table.loc[table["check"] == check, "verdict"].tolist() == [expected]
        assert (table["source"] == oh.QUESTION).all() and (table["evidence"] == "trained").all()
    assert "0.710 (n 6) vs 0.420 (n 6)" in oh.verdicts(_frame(0.7, 0.4)).iloc[0]["measured"]
    assert oh.verdicts(_frame(0.5, 0.485)).iloc[0]["measured"].startswith("0.510 (n 6) vs 0.505 (n 6)")


def test_the_notebook_applies_only_with_study_a_on():
    paper_c = study.load("c")
    alone = config.validate({"studies": ["c"]})
    assert "our_heads" not in {nb.name for nb in paper_c.runnable(alone)}
    assert paper_c.unmet("our_heads", alone).startswith("not applicable to this configuration: it reads study a's results")
    both = config.validate({"studies": ["a", "c"]})
    assert paper_c.unmet("our_heads", both) is None
    assert paper_c.notebook_inputs("our_heads", both) == {"our_heads": "results/c/our_heads/our_heads.csv"}


def test_on_the_tiny_runs_only_the_fingerprint_jobs_run_and_the_notebook_answers(tiny_run, tmp_path):
    """With studies [a, c] over the finished tiny pipeline (a copy of it: the shared run stays as it was), the
    fingerprint jobs, their gather and the notebook are all that runs; the table has every head at every checkpoint."""
    workdir = tmp_path / "tiny"
    shutil.copytree(tiny_run, workdir, symlinks=True)
    target = "results/c/notebooks/our_heads.ipynb"
    plan = planned_jobs(snakemake(workdir, "-n", target, configfiles=CONFIG_MATRIX["ac"]))
    assert plan == {"c_our_heads": 2, "c_our_heads_gather": 1, "c_notebook_our_heads": 1}
    snakemake(workdir, target, configfiles=CONFIG_MATRIX["ac"])
    table = pd.read_csv(workdir / "results" / "c" / "our_heads" / "our_heads.csv")
    scores = pd.concat(pd.read_csv(p).assign(task=p.parts[-3]) for p in (workdir / "results" / "a" / "scores" / "main").glob("*/seed0/scores.csv"))
    assert len(table) == len(scores) and set(table["task"]) == {"number", "letter"}
    assert (table["fold_error"] < 1e-4).all() and table["rotary"].all() and (table["rank"] == 31).all()
    assert table[["dir_frac", "D_head", "dir_frac_z", "rope_imag_frac", "hi_freq_dir"]].notna().all().all()
    verdicts = pd.read_csv(workdir / "results" / "c" / "tables" / "our_heads_verdicts.csv")
    assert set(verdicts["verdict"]) <= {"pass", "fail", "not tested"} and len(verdicts) == 4 * 3
    assert (workdir / "results" / "c" / "figures" / "our_heads_training.png").is_file()


def _b_model(kv_source: str):
    """A random paper-B encoder (RoPE plus sinusoid, bidirectional) with LayerNorm gains away from 1 and no bias
    in the LayerNorm or the q/k linears, so that the folded form is the whole score."""
    from posym.studies.b.architecture import model_config as b_model_config

    settings = {**config.study_defaults("b")["model"], "n_layer": 2, "n_head": 4, "d_model": 32, "d_mlp": 32, "max_len": 16}
    settings.update(position="rope_sinusoid", kv_source=kv_source)
    model = b_model_config(19, settings).build().initialise([0]).eval()
    with torch.no_grad():
        for block in model.blocks:
            block.ln1_weight.copy_(1 + 0.4 * torch.randn_like(block.ln1_weight))
            for bias in (block.ln1_bias, block.q_bias, block.kv_bias):
                bias.zero_()
    return model


@pytest.mark.parametrize("kv_source", ["embeddings", "residual"])
def test_paper_bs_folded_form_is_its_own_score_where_rope_cancels(kv_source):
    model = _b_model(kv_source)
    ids = torch.randint(1, 19, (3, 16), generator=torch.Generator().manual_seed(3))
    names = [f"blocks.{l}.{n}" for l in range(2) for n in ("hook_resid_pre", "attn.hook_attn_scores")]
    cache = model.run_with_cache(ids, names)
    memory = cache["blocks.0.hook_resid_pre"][0].double().numpy()  # layer 0 reads the embeddings
    for layer in range(2):
        resid = cache[f"blocks.{layer}.hook_resid_pre"][0]
        n = F.layer_norm(resid, (32,), eps=model.config.layer_norm_epsilon).double().numpy()
        keys = memory if kv_source == "embeddings" else n
        diagonal = np.diagonal(cache[f"blocks.{layer}.attn.hook_attn_scores"][0].double().numpy(), axis1=-2, axis2=-1)
        for head, (W_Q, W_K) in enumerate(oh.b_folded_weights(model, layer)):
            predicted = np.einsum("btd,dk,btk->bt", n, W_Q, keys @ W_K) * model.config.scale
            assert np.abs(predicted - diagonal[:, head]).max() <= 1e-5 * np.abs(diagonal).max()


def test_the_deposit_head_comes_from_paper_b_s_ablation_table_and_an_old_table_is_refused(tmp_path):
    ablation = pd.DataFrame({"layer": [0, 0], "head": [0, 1], "drop": [3.0, 55.0], "accuracy": [0.9, 0.4], "role": ["other", "deposit"]})
    assert oh.deposit_roles(ablation, tmp_path / "ablation.csv").columns.tolist() == ["layer", "head", "drop", "role"]
    with pytest.raises(ValueError, match="ablation.csv: no role column"):
        oh.deposit_roles(ablation.drop(columns="role"), tmp_path / "ablation.csv")


def test_the_rank_sum_p_is_the_exact_chance_under_uniform_ranks():
    import itertools

    sizes = (4, 3, 5)
    for ranks in ((1, 1, 1), (2, 1, 3), (4, 3, 5), (1, 3, 2)):
        outcomes = list(itertools.product(*(range(1, n + 1) for n in sizes)))
        expected = sum(sum(o) <= sum(ranks) for o in outcomes) / len(outcomes)
        assert oh.rank_sum_p(ranks, sizes) == pytest.approx(expected)
    assert oh.rank_sum_p([1], [16]) == pytest.approx(1 / 16) and oh.rank_sum_p([16], [16]) == pytest.approx(1.0)


def _b_frame(deposit_values, others=0.5, rotary=True, n_head=8):
    """Paper-B fingerprint rows: one run per value in ``deposit_values`` (None: no deposit head), layer 0's head 0
    the deposit head at that value, its other heads at ``others`` + small steps, and a layer 1 far above them all."""
    rows = []
    for seed, value in enumerate(deposit_values):
        for layer in (0, 1):
            for head in range(n_head):
                deposit = layer == 0 and head == 0 and value is not None
                metric = value if deposit else (others + 0.001 * head if layer == 0 else 0.99)
                rows.append({"variant": "rope", "task": "distance", "seed": seed, "layer": layer, "head": head, "role": "deposit" if deposit else "other",
                             "rotary": rotary, **{name: metric for name in ("dir_frac", "D_head", "rope_imag_frac", "hi_freq_dir")}})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_deposit_verdict_can_pass_fail_or_go_untested():
    def verdict(frame, metric="dir_frac"):
        table = oh.deposit_verdicts(frame)
        assert (table["source"] == oh.QUESTION).all() and (table["evidence"] == "trained").all()
        return table.loc[table["check"].str.contains(f": {metric} of the deposit head"), ["verdict", "measured"]].iloc[0]

    # on top of its layer 0 (layer 1 does not count) in each of 3 runs of 8 heads: p = 1/512
    top = verdict(_b_frame([0.9, 0.9, 0.9]))
    assert top["verdict"] == "pass" and "rope seed 0: 1/8" in top["measured"] and "p 0.00195" in top["measured"]
    assert verdict(_b_frame([0.1, 0.1, 0.9]))["verdict"] == "fail"  # at the bottom in two runs
    assert verdict(_b_frame([None, None]))["verdict"] == "not tested"
    one = verdict(_b_frame([0.9]))  # one run of 8 heads: p = 1/8 at best
    assert one["verdict"] == "not tested" and "p would be 0.125" in one["measured"]
    # RoPE's metrics compare heads that rotate: none here
    assert verdict(_b_frame([0.9, 0.9, 0.9], rotary=False), "rope_imag_frac")["verdict"] == "not tested"
    assert verdict(_b_frame([0.9, 0.9, 0.9], rotary=False), "D_head")["verdict"] == "pass"


def test_with_paper_b_on_every_run_of_standard_attention_is_fingerprinted(tmp_path):
    from conftest import copy_repo

    both = tmp_path / "bc.yaml"
    both.write_text("studies: [b, c]\n")
    workdir = copy_repo(tmp_path / "repo")
    jobs = planned_jobs(snakemake(workdir, "-n", "results/c/notebooks/our_heads_b.ipynb", configfiles=[*CONFIG_MATRIX["b"], both]))
    # tests/configs/b.yaml: distance [rope, nope, alibi, partial_rope_1, mla], count [rope, nope, mla]; MLA is left out
    assert jobs["c_our_heads_b"] == 6 and jobs["c_our_heads_b_gather"] == 1 and jobs["c_notebook_our_heads_b"] == 1
    assert "c_our_heads" not in jobs  # paper A is off


def test_the_head_classes_are_paper_as_own_from_its_purity_table():
    purity = pd.DataFrame(
        {"step": [10, 10, 10, 10], "final": True, "gamma": [0.1, 0.1, 0.05, 0.05], "kind": ["positional", "symbolic"] * 2,
         "count": [1, 2, 0, 1], "heads": ["0", "1 3", "", "3"]}
    )  # fmt: skip
    assert oh.head_classes(purity, 0.1).values.tolist() == [[10, 0, 0, "positional"], [10, 1, 0, "symbolic"], [10, 3, 0, "symbolic"]]
    assert oh.head_classes(purity, 0.05).values.tolist() == [[10, 3, 0, "symbolic"]]
    multi = purity.assign(heads=["0.1", "1.0 3.2", "", "3.2"])
    assert oh.head_classes(multi, 0.1)[["layer", "head"]].values.tolist() == [[0, 1], [1, 0], [3, 2]]
    with pytest.raises(ValueError, match="a.scores.gammas"):
        oh.head_classes(purity, 0.2)
