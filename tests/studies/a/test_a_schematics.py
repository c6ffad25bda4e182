"""Fig 1 (task schematics) and Table 2 (LLM prompts) of paper A (spec §A1, §A10.2, §A11)."""

import pandas as pd
import pytest
from matplotlib.patches import FancyArrowPatch

from posym.studies.a import task_figures as schematics
from posym.studies.a.tasks import PAPER_ORDER, get, multihop


@pytest.mark.parametrize("task, answer", [("number", "C"), ("letter", "C2")])
def test_paper_examples_take_four_hops_to_their_answer(task, answer):
    tokens = get(task).fig1_example["tokens"]
    chain = get(task).follow_example(tokens)
    # spec §A1: 1 → 2 → 1 → 4 → C and IG → GD → DE → EC → C2
    assert chain == [7, 5, 4, 0] and tokens[chain[-1]] == answer


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_string_chains_agree_with_the_generators(task):
    data = get(task).generate_split("test", 42, 48)
    positions = get(data.task).chain_positions(data)
    for row in range(len(data)):
        expected = [int(p) for p in positions[row] if p >= 0]
        assert get(task).follow_example(get(task).vocabulary.decode(data.tokens[row])) == expected


def test_follow_chain_refuses_an_ambiguous_letter_chain():
    with pytest.raises(ValueError, match="2 tokens start with 'a'"):
        get("letter").follow_example(["a1", "a2", "xa"])


def test_generated_example_is_a_four_hop_sample_of_the_test_split():
    example = schematics.generated_example("letter", seed=7)
    assert len(example["tokens"]) == multihop.SEQ_LEN and len(example["chain"]) == 4
    assert example["chain"] == get("letter").follow_example(example["tokens"])
    assert example["chain"][-1] < multihop.WINDOW


def test_figure1_draws_one_numbered_arrow_per_hop():
    panels = schematics.figure1_examples(seed=42)
    assert [p["task"] for p in panels] == ["number", "number", "letter", "letter"]
    fig = schematics.plot_task_schematics(panels)
    for ax, panel in zip(fig.axes, panels):
        arrows = [p for p in ax.patches if isinstance(p, FancyArrowPatch)]
        assert len(arrows) == len(panel["chain"]) == 4
        texts = [t.get_text() for t in ax.texts]
        assert texts[: len(panel["tokens"])] == panel["tokens"] and texts[-4:] == ["1", "2", "3", "4"]
        assert ax.get_title(loc="left").endswith(f"answer {panel['tokens'][panel['chain'][-1]]}")


def test_table2_is_the_runners_own_templates(tmp_path):
    table = schematics.prompt_table()
    assert table["task"].tolist() == list(PAPER_ORDER)
    assert table["template"].tolist() == [get("number").probe_prompt, get("letter").probe_prompt]
    assert table.loc[0, "few-shot examples"].splitlines() == [
        "a z b y c x d w 5 → y",
        "v t k g n k o h m p 4 → o",
        "w y b c v t r i p p 10 → w",
    ]
    schematics.save_prompt_table(table, {"csv": tmp_path / "t.csv", "md": tmp_path / "t.md"})
    pd.testing.assert_frame_equal(pd.read_csv(tmp_path / "t.csv"), table)
    markdown = (tmp_path / "t.md").read_text().splitlines()
    assert len(markdown) == 2 + len(PAPER_ORDER) and markdown[2].startswith("| number | You will be given")
