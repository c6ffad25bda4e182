"""Tests of posym.probes: prompt text, and correct, unique answers for every window and run."""

import re
from collections import Counter

import pytest

from posym import probes


@pytest.mark.parametrize("task", probes.TASKS)
def test_few_shot_examples_are_in_the_prompt_and_obey_the_rule(task):
    prompt = probes.render_prompt(task, ["x"])
    for example_input, answer in probes.FEW_SHOT[task]:
        assert f'Input: "{example_input}"\nOutput: {answer}\n' in prompt
        assert probes.solve(task, example_input.split()) == answer
    assert prompt.count("Input:") == 4 and prompt.endswith('Task:\nInput: "x"\nOutput:')
    assert prompt.startswith("You will be given a sequence of space-separated tokens.")


def test_prompt_instructions_follow_table_2():
    assert "Move 'n' positions to the left from that final token." in probes.NUMBER_PROMPT
    assert "always be a number 'n'" in probes.NUMBER_PROMPT
    assert "Identify the second character of that token." in probes.LETTER_PROMPT
    assert "there is only one token that fulfills this condition" in probes.LETTER_PROMPT
    for prompt in probes.PROMPTS.values():
        assert "Output just the target token and absolutely nothing else." in prompt
        assert prompt.count("{sequence}") == 1


def test_render_prompt_inserts_the_sequence():
    prompt = probes.render_prompt("letter", ["a1", "b2", "qa"])
    assert prompt.endswith('Input: "a1 b2 qa"\nOutput:')


@pytest.mark.parametrize("task", probes.TASKS)
def test_every_item_has_a_correct_unique_answer(task):
    for window in probes.PROBE_WINDOWS:
        for run in probes.PROBE_RUNS:
            items = probes.probe_items(task, window, probes.PROBE_ITEMS, seed=run)
            assert len(items) == probes.PROBE_ITEMS
            for item in items:
                tokens = item["tokens"]
                assert len(tokens) == window + 1 and item["window"] == window and item["task"] == task
                assert item["query"] == tokens[-1]
                assert item["answer"] == tokens[item["target_index"]] == probes.solve(task, tokens)
                assert item["prompt"] == probes.render_prompt(task, tokens)
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
    for task in probes.TASKS:
        a = probes.probe_items(task, 24, 20, seed=1)
        assert a == probes.probe_items(task, 24, 20, seed=1)
        assert a != probes.probe_items(task, 24, 20, seed=2)


def test_query_and_target_positions_are_spread():
    """Number queries cover 1..W and Letter targets cover the whole window (no position bias by construction)."""
    items = [i for run in probes.PROBE_RUNS for i in probes.probe_items("number", 12, 100, seed=run)]
    assert {int(i["query"]) for i in items} == set(range(1, 13))
    items = [i for run in probes.PROBE_RUNS for i in probes.probe_items("letter", 12, 100, seed=run)]
    assert {i["target_index"] for i in items} == set(range(12))


def test_solve_rejects_ambiguous_letter_inputs():
    with pytest.raises(ValueError):
        probes.solve("letter", ["a1", "a2", "xa"])
    with pytest.raises(ValueError):
        probes.solve("number", ["a", "b", "3"])
