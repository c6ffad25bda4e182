"""Paper C on real language models (posym.studies.c.real_models): the per-model measurement on a tiny random Llama
the test converts offline, the tables beside the paper's rows, and claim C-6's checks, which can pass, fail or go
untested."""

from __future__ import annotations

import pandas as pd
import pytest
import torch
from scipy import stats

from conftest import build_tiny_llm
from posym.pipeline import config
from posym.lm import pretrained
from posym.studies.c import paper
from posym.studies.c import real_models as rm

pytest.importorskip("transformer_lens")
pytestmark = pytest.mark.usefixtures("one_torch_thread")


def section(**changes) -> dict:
    settings = config.study_defaults("c")["real_models"]
    small = {"null_draws": 10, "scores": {**settings["scores"], "sequences": 6, "length": 10}, "bootstrap_draws": 20,
             "ablation": {**settings["ablation"], "sequences": 4, "modes": ["rope", "sym"]}, "batch_size": 3, "induction_heads": 1}  # fmt: skip
    return {**settings, **small, **changes}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HF_HUB_OFFLINE", "1")
        source = build_tiny_llm(tmp_path_factory.mktemp("hf") / "tiny-llm")
        out = tmp_path_factory.mktemp("models") / "tiny"
        pretrained.convert(str(source), out)
    return out


@pytest.fixture(scope="module")
def measured(converted):
    return rm.run(converted, "tiny", section())


def test_bfloat16_forward_passes_keep_the_static_metrics_and_move_the_scores_little(converted):
    from posym.lm.lens import pretrained_lens_model

    model, _ = pretrained_lens_model(converted)
    wide, _ = rm.measure(model, section())
    narrow, info = rm.measure(model, section(dtype="bfloat16"))
    assert info["dtype"] == "bfloat16" and next(model.parameters()).dtype == torch.float32  # a copy ran in bf16
    pd.testing.assert_frame_equal(wide[["dir_frac", "D_head", "rope_imag_frac", "copying"]], narrow[["dir_frac", "D_head", "rope_imag_frac", "copying"]])
    assert (wide[["prev", "dup", "ind"]] - narrow[["prev", "dup", "ind"]]).abs().max().max() < 0.02
    assert (wide[["ce_rope", "ce_sym"]] - narrow[["ce_rope", "ce_sym"]]).abs().max().max() < 0.05  # the ablations run in bf16 too


def test_every_head_is_measured_and_every_table_names_its_model(measured):
    heads = measured["heads"]
    assert len(heads) == 2 * 4 and list(heads[["layer", "head"]].iloc[-1]) == [1, 3]
    for name, table in measured.items():
        assert set(table["model"]) == {"tiny"}, name
    for column in ("dir_frac", "D_head", "dir_frac_z", "D_head_z", "prev", "dup", "ind", "copying", "rope_imag_frac", "ce_rope", "ce_sym"):
        assert heads[column].notna().all(), column
    assert heads[["prev", "dup", "ind"]].stack().between(0, 1).all()


def test_the_summary_is_the_heads_statistics(measured):
    heads, row = measured["heads"], measured["summary"].iloc[0]
    assert row["rho_dir"] == pytest.approx(stats.spearmanr(heads["dir_frac"], heads["prev"]).statistic)
    assert (row["rotary_dim"], row["d_head"], row["pairing"]) == (8, 8, "rotate_half")  # hidden 32 / 4 heads, all rotary
    top = heads.loc[heads["dInd_rope"].idxmax()]
    assert row["im_head"] == f"{top['layer']}.{top['head']}" and row["im_ce_after"] == pytest.approx(top["ce_rope"])
    assert row["im_prev_rank"] == 1 + int((heads["prev"] > top["prev"]).sum())
    assert row["im_ce_after"] - row["im_ce_before"] == pytest.approx(top["dInd_rope"])


def test_the_tables_set_the_papers_rope_models_beside_ours(measured):
    table2 = rm.table2(measured["summary"])
    assert list(table2["model"]) == ["tiny", "Pythia-410m", "Pythia-1.4B", "Llama-3-8B"]
    assert table2.loc[1, "top_k_percentile"] == paper.TABLE2["pythia-410m"][4] and table2.loc[0, "positions"] == "RoPE 100 %"
    ablation = rm.ablation(measured["summary"])
    assert list(ablation["source"]) == ["ours", "paper", "paper", "paper"]
    assert ablation.loc[1, "ratio"] == pytest.approx(2.24 / 0.52)
    table1 = rm.table1(measured["correlations"])
    cells = table1.set_index(["metric", "score"])
    assert len(table1) == 4 * 4 and cells.loc[("dir_frac", "prev"), "GPT-2 (paper)"] == 0.47
    assert pd.isna(cells.loc[("D_head", "prev"), "GPT-2 (paper)"]) and pd.isna(cells.loc[("D_head", "prev"), "GPT-2 significant (paper)"])


def test_c6_can_pass_fail_or_go_untested(measured):
    thresholds = config.study_defaults("c")["real_models"]["claims"]
    row = measured["summary"].iloc[0].to_dict()
    easy = {"alpha": 1.0, "top_k_percentile": 0.0, "prev_rank": 10**6, "ce_ratio": 0.0}
    impossible = {"alpha": 1e-300, "top_k_percentile": 1.01, "prev_rank": 0, "ce_ratio": 1e9}
    good = {**row, "rho_dir": abs(row["rho_dir"]) + 0.01, "rho_dir_p": 0.0}
    # ρ(dir_frac, prev) is shown, never judged: the paper finds it positive with absolute positions too
    assert list(rm.claim_c6(pd.DataFrame([good]), easy)["verdict"]) == ["observation", "pass", "pass", "pass"]
    assert list(rm.claim_c6(pd.DataFrame([row]), impossible)["verdict"]) == ["observation", "fail", "fail", "fail"]
    # a random model's median percentile sits near 0.5: that check supports, the Im(M_t) ablation decides
    assert [bool(s) for s in rm.claim_c6(pd.DataFrame([row]), easy)["supporting"]] == [False, True, False, False]
    unmeasured = {k: v for k, v in row.items() if not k.startswith("im_")} | {"pairing": "none"}
    verdicts = rm.claim_c6(pd.DataFrame([unmeasured]), thresholds).set_index("check")["verdict"]
    assert list(verdicts)[1:] == ["not tested"] * 3
    assert verdicts.index.str.startswith("tiny (substitute)").all()
