"""Information-flow grids (spec §A8, §A9): the idealised Index / Retrieval flows solve the tasks, the Fig 3
examples are valid inputs, and the model-flow procedure reproduces Index when a model attends like it."""

import json

import numpy as np
import pandas as pd
import pytest
import torch

from conftest import model_config
from posym.training import checkpoints
from posym import cli
from posym.data.files import write_json
from posym.nn.gptj import PosymModel
from posym.studies.a import information_flow as flow
from posym.studies.a.tasks import PAPER_ORDER, get
from posym.data.tasks import TaskData


def as_tokens(task, ids):
    return get(task).vocabulary.decode(ids)


# --------------------------------------------------------------------------- the basic functions


def test_listing_1_on_the_figure_1_examples():
    number = "C B A 1 4 1 3 2 1".split()  # 4 hops, answer C
    rows = flow.ideal_rows("number", number, n_layer=6)
    assert rows[4][-1] == "C" and all(row[-1] == "1" for row in rows[:4])
    assert flow.hop_count("number", rows) == 4 and rows[5] == rows[6] == rows[4]  # Reflexive after the hops
    letter = "C2 B1 A3 FA EC DE HF GD IG".split()  # IG → GD → DE → EC → C2
    rows = flow.ideal_rows("letter", letter, n_layer=2)
    assert [row[-1] for row in rows] == ["IG", "GD", "DE", "EC", "C2"]  # more hops than layers: all hops shown


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_hop_function_h_times_then_reflexive_gives_the_label_of_generated_samples(task):
    data = get(task).generate_split("test", 42, 300)
    for tokens, label, hops in zip(data.tokens, data.labels, data.hops):
        rows = flow.ideal_rows(task, as_tokens(task, tokens), n_layer=6)
        assert flow.hop_count(task, rows) == hops
        assert rows[-1][-1] == get(task).vocabulary.tokens[label]
        assert all(not get(task).is_answer_token(row[-1]) for row in rows[:hops])


def test_an_input_without_a_chain_is_refused():
    with pytest.raises(ValueError, match="no hop chain"):
        flow.ideal_rows("letter", "a1 b2 cd".split(), n_layer=2)  # no token starts with d


@pytest.mark.parametrize("task, answer, position, hops", [("number", "n", 2, 4), ("letter", "a2", 4, 3)])
def test_the_figure_3_examples_are_valid_task_inputs(task, answer, position, hops):
    vocab = get(task).vocabulary
    ids = np.array([[vocab.index(t) for t in flow.example(task)]], dtype=np.uint8)
    arrays = {"hops": np.array([hops], np.uint8), "target_pos": np.array([position], np.int32)}
    data = TaskData(task, ids, np.array([vocab.index(answer)], np.uint8), arrays)
    get(data.task).validate(data)  # re-follows the chain: label, hop count and answer position must agree


def test_answer_arrivals_trace_the_hops_of_the_ideal_number_flow():
    grid = flow.ideal_flow("number", flow.example("number"), n_layer=12)
    assert grid["depth"].max() == 12
    # the hop chain 16 → 14 → 10 → 8 → 2 ('n'), one hop per layer; offset 7 at 15 also points at 8
    assert flow.answer_arrivals(grid, "n") == {8: 1, 10: 2, 14: 3, 15: 2, 16: 4}


def test_answer_symbols_by_id_and_by_token_agree():
    for task in PAPER_ORDER:
        vocab = get(task).vocabulary
        by_id = get(task).is_answer_id(np.arange(1, len(vocab)))
        by_token = [get(task).is_answer_token(t) for t in vocab.tokens[1:]]
        assert by_id.tolist() == by_token and 0 < sum(by_token) < len(by_token)


# ------------------------------------------------------------------------------ the model flow


class IndexAttention:
    """A stand-in model whose every layer attends like Index: an offset σ at i looks at i − σ, a letter at itself."""

    def __init__(self, tokens, n_layer):
        self.config = model_config(len(get("number").vocabulary), n_layer=n_layer)
        offsets = [0 if not t.isdigit() else int(t) for t in tokens]
        pattern = torch.zeros(len(tokens), len(tokens))
        pattern[torch.arange(len(tokens)), torch.arange(len(tokens)) - torch.tensor(offsets)] = 1.0
        self.pattern = pattern[None, None, None]  # (member, batch, head, T, T)

    def eval(self):
        return self

    def run_with_cache(self, ids, names):
        return {name: self.pattern for name in names}

    def __call__(self, ids):
        logits = torch.zeros(1, self.config.vocab_size)
        logits[0, get("number").vocabulary.index("n")] = 1.0
        return logits


def test_a_model_attending_like_index_has_the_ideal_flow():
    tokens = flow.example("number")
    grid, prediction = flow.model_flow(IndexAttention(tokens, n_layer=5), "number", tokens)
    ideal = flow.ideal_flow("number", tokens, n_layer=5)
    assert prediction == "n"
    pd.testing.assert_frame_equal(grid.drop(columns="attended"), ideal.drop(columns="attended"))
    assert grid.query("depth == 1 and position == 16")["attended"].item() == 14


def test_uniform_attention_copies_the_first_symbol_everywhere():
    model = PosymModel(model_config(len(get("number").vocabulary), n_layer=2, d_model=16)).initialise([0])
    with torch.no_grad():
        for block in model.blocks:
            block.q_weight.zero_()
    grid, _ = flow.model_flow(model, "number", flow.example("number"))
    after_first = grid[grid["depth"] == 1]
    assert (after_first["token"] == "n").all() and (after_first["attended"] == 0).all()  # ties go to the first key


def test_flow_cli_writes_grid_and_summary(tmp_path):
    vocab = list(get("letter").vocabulary.tokens)
    model = PosymModel(model_config(len(vocab), n_layer=3, d_model=16)).initialise([0])
    directory = checkpoints.write_checkpoint(tmp_path / "checkpoints", 50, model, 0, vocab, {"eval": [], "log": []})
    entry = {
        "step": 50,
        "path": str(directory.relative_to(tmp_path)),
        "sha256": checkpoints.verify(directory)["model.safetensors"],
    }
    write_json(tmp_path / "checkpoints.json", {"checkpoints": [entry]})
    command = ["a", "flow", "--index", str(tmp_path / "checkpoints.json"), "--task", "letter"]
    assert cli.main(command + ["--out-grid", str(tmp_path / "grid.csv"), "--out-summary", str(tmp_path / "summary.json")]) == 0
    grid = flow.read_grid(tmp_path / "grid.csv")
    assert len(grid) == 4 * 17 and set(grid["step"]) == {50}
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (
        summary["answer"] == "a2"
        and summary["hops"] == 3
        and summary["ideal_arrivals"] == {"10": 1, "13": 2, "15": 3, "16": 3}
    )
    table = flow.summary_table([summary], seeds=[0])
    assert table.loc[0, "answer reaches (ideal)"] == "10@L0 13@L1 15@L2 16@L2"
    figure = flow.plot_flows(
        [grid, flow.ideal_flow("letter", flow.example("letter"), 3)], ["a2", "a2"], ["model", "ideal"], columns=2
    )
    assert len(figure.axes) == 2
