"""Paper A's LLM probes (its tasks' probe prompts and llm_probes.probe_items): prompt text, and correct, unique
answers for every window and run."""

import re
from collections import Counter

import pytest

from posym.pipeline import config
from posym.studies.a import llm_probes
from posym.studies.a.tasks import PAPER_ORDER, get

LLM = config.study_defaults("a")["llm"]


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_few_shot_examples_are_in_the_prompt_and_obey_the_rule(task):
    prompt = get(task).render_probe(["x"])
    for example_input, answer in get(task).probe_examples:
        assert f'Input: "{example_input}"\nOutput: {answer}\n' in prompt
        assert get(task).solve_probe(example_input.split()) == answer
    assert prompt.count("Input:") == 4 and prompt.endswith('Task:\nInput: "x"\nOutput:')
    assert prompt.startswith("You will be given a sequence of space-separated tokens.")


def test_prompt_instructions_follow_table_2():
    assert "Move 'n' positions to the left from that final token." in get("number").probe_prompt
    assert "always be a number 'n'" in get("number").probe_prompt
    assert "Identify the second character of that token." in get("letter").probe_prompt
    assert "there is only one token that fulfills this condition" in get("letter").probe_prompt
    for prompt in (get(t).probe_prompt for t in PAPER_ORDER):
        assert "Output just the target token and absolutely nothing else." in prompt
        assert prompt.count("{sequence}") == 1


def test_render_prompt_inserts_the_sequence():
    prompt = get("letter").render_probe(["a1", "b2", "qa"])
    assert prompt.endswith('Input: "a1 b2 qa"\nOutput:')


@pytest.mark.parametrize("task", PAPER_ORDER)
def test_every_item_has_a_correct_unique_answer(task):
    for window in llm_probes.PAPER_WINDOWS:
        for run in LLM["runs"]:
            items = llm_probes.probe_items(task, window, LLM["items"], seed=run)
            assert len(items) == LLM["items"]
            for item in items:
                tokens = item["tokens"]
                assert len(tokens) == window + 1 and item["window"] == window and item["task"] == task
                assert item["query"] == tokens[-1]
                assert item["answer"] == tokens[item["target_index"]] == get(task).solve_probe(tokens)
                assert item["prompt"] == get(task).render_probe(tokens)
                if task == "number":
                    assert all(re.fullmatch(r"[a-z]", t) for t in tokens[:-1])
                    assert 1 <= int(item["query"]) <= window
                    assert item["target_index"] == window - int(item["query"])
                else:
                    assert all(re.fullmatch(r"[a-z][1-9]", t) for t in tokens[:-1])
                    assert re.fullmatch(r"[a-z][a-z]", item["query"])
                    starts = Counter(t[0] for t in tokens)  # including the query
                    assert starts[item["query"][1]] == 1 and item["answer"][0] == item["query"][1]


def test_items_are_deterministic_and_runs_differ():
    for task in PAPER_ORDER:
        a = llm_probes.probe_items(task, 24, 20, seed=1)
        assert a == llm_probes.probe_items(task, 24, 20, seed=1)
        assert a != llm_probes.probe_items(task, 24, 20, seed=2)


def test_query_and_target_positions_are_spread():
    """Number queries cover 1..W and Letter targets cover the whole window (no position bias by construction)."""
    items = [i for run in LLM["runs"] for i in llm_probes.probe_items("number", 12, 100, seed=run)]
    assert {int(i["query"]) for i in items} == set(range(1, 13))
    items = [i for run in LLM["runs"] for i in llm_probes.probe_items("letter", 12, 100, seed=run)]
    assert {i["target_index"] for i in items} == set(range(12))


def test_solve_rejects_ambiguous_letter_inputs():
    with pytest.raises(ValueError):
        get("letter").solve_probe(["a1", "a2", "xa"])
    with pytest.raises(ValueError):
        get("number").solve_probe(["a", "b", "3"])


def test_the_figures_window_axis_is_the_default_grid():
    # Fig 5C/D draw their x axis at the paper's windows, the schema's default llm.windows.
    assert llm_probes.PAPER_WINDOWS == tuple(LLM["windows"])
