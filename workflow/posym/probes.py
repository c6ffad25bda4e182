"""Few-shot 1-hop probes for pretrained LLMs (spec §A10.2, paper A §3.7, App. H, Table 2).

Paper A asks frontier models, with growing target windows, for the token ``n`` places left of a final integer
``n`` (Number) or for the one token whose first character is the final token's second character (Letter).
The closed APIs cannot be run here; the same prompts and items feed the offline substitutes (local RoPE
models) of spec §A10.2.

The prompt text follows paper A's Table 2 as transcribed in spec §A10.2 (instructions and few-shot examples);
the "Example k:" / "Task:" layout follows the transcription in jcalataiut-cli/CENIA
``Position_symbolic_dynamics/report_code.md`` §8.1. The item generators are the spec's PROPOSED ones.
"""

from __future__ import annotations

import string

import numpy as np

from posym.tasks import TASKS

PROBE_WINDOWS = (12, 16, 24, 32, 48, 64, 80, 100, 150, 200, 300)  # target-window sizes W (spec §0, §A10.2)
PROBE_RUNS = (0, 1, 2, 3, 4)  # run i uses seed i and a fresh item set
PROBE_ITEMS = 100  # items per window and run: PROPOSED, the paper does not say

LETTERS = string.ascii_lowercase
#: Letter-task digits. Table 2's examples use 1..9 (``w9``, ``a4``, ``d1``) and never 0.
PROBE_DIGITS = "123456789"

NUMBER_PROMPT = """You will be given a sequence of space-separated tokens.
Your task is to find the target token by following these rules:
1. Identify the very last token in the sequence, which will always be a number 'n'.
2. Move 'n' positions to the left from that final token.
3. The token you land on is the target token.
Output just the target token and absolutely nothing else. Do not include any explanations or formatting.

Example 1:
Input: "a z b y c x d w 5"
Output: y

Example 2:
Input: "v t k g n k o h m p 4"
Output: o

Example 3:
Input: "w y b c v t r i p p 10"
Output: w

Task:
Input: "{sequence}"
Output:"""

LETTER_PROMPT = """You will be given a sequence of space-separated tokens.
Your task is to find the target token by following these rules:
1. Start with the very last token in the sequence.
2. Identify the second character of that token.
3. Scan backwards (to the left) to find the token that starts with that exact character; there is only one token that fulfills this condition.
4. This is your target token.
Output just the target token and absolutely nothing else. Do not include any explanations or formatting.

Example:
Input: "a4 b3 c2 d1 fc"
Output: c2

Input: "w9 t7 l5 g1 n4 l6 u9 k7 m5 p8 gk"
Output: k7

Input: "q5 r7 x4 t7 f4 k7 q4 u2 u3 r5 ex"
Output: x4

Task:
Input: "{sequence}"
Output:"""

PROMPTS = {"number": NUMBER_PROMPT, "letter": LETTER_PROMPT}

#: The few-shot examples of each prompt as (input, answer): kept apart so tests can check both the prompt
#: text and that each example obeys the rule it illustrates.
FEW_SHOT = {
    "number": (("a z b y c x d w 5", "y"), ("v t k g n k o h m p 4", "o"), ("w y b c v t r i p p 10", "w")),
    "letter": (
        ("a4 b3 c2 d1 fc", "c2"),
        ("w9 t7 l5 g1 n4 l6 u9 k7 m5 p8 gk", "k7"),
        ("q5 r7 x4 t7 f4 k7 q4 u2 u3 r5 ex", "x4"),
    ),
}


def render_prompt(task: str, sequence_tokens) -> str:
    """The few-shot prompt of ``task`` asking about ``sequence_tokens`` (window tokens then the query)."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}")
    return PROMPTS[task].replace("{sequence}", " ".join(sequence_tokens))


def solve(task: str, sequence_tokens) -> str:
    """The answer by the prompt's rule, for scoring and checking; raises ``ValueError`` if it is not unique."""
    tokens = list(sequence_tokens)
    *window, query = tokens
    if task == "number":
        steps = int(query)
        if not 1 <= steps <= len(window):
            raise ValueError(f"query {query} points outside the window")
        return window[len(window) - steps]
    matches = [token for token in window if token[0] == query[1]]
    if len(matches) != 1:
        raise ValueError(f"{len(matches)} tokens start with {query[1]!r}")
    return matches[0]


def probe_items(task: str, window: int, n_items: int = PROBE_ITEMS, seed: int = 0) -> list[dict]:
    """``n_items`` 1-hop items with a target window of ``window`` tokens (generators PROPOSED in spec §A10.2).

    Number: ``window`` lowercase letters (repeats allowed), then the query ``n`` ~ U{1..window}; the answer is
    the token ``n`` places left of the query. Letter: ``window`` letter+digit tokens whose first letters are
    drawn (with repeats) from the 25 letters other than the target letter, which starts exactly one token at a
    uniform position; the query is ``Q1 Q2`` with Q2 the target letter and Q1 another letter (so the prompt's
    "only one token" holds even counting the query). Deterministic in (task, window, seed).

    Each item: ``tokens`` (window tokens then the query), ``query``, ``answer``, ``target_index`` (of the
    answer in ``tokens``), ``window``, ``task``, ``prompt``.
    """
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}")
    if window < 1:
        raise ValueError("window must be ≥ 1")
    draw = np.random.default_rng([seed, window, TASKS.index(task)])
    items = []
    for _ in range(n_items):
        if task == "number":
            sequence = [LETTERS[i] for i in draw.integers(0, len(LETTERS), size=window)]
            steps = int(draw.integers(1, window + 1))
            target_index = window - steps
            sequence.append(str(steps))
        else:
            target_letter = int(draw.integers(0, len(LETTERS)))
            others = [letter for i, letter in enumerate(LETTERS) if i != target_letter]
            firsts = [others[i] for i in draw.integers(0, len(others), size=window)]
            target_index = int(draw.integers(0, window))
            firsts[target_index] = LETTERS[target_letter]
            digits = [PROBE_DIGITS[i] for i in draw.integers(0, len(PROBE_DIGITS), size=window)]
            sequence = [a + d for a, d in zip(firsts, digits)]
            sequence.append(others[int(draw.integers(0, len(others)))] + LETTERS[target_letter])
        items.append(
            {
                "task": task,
                "window": window,
                "tokens": sequence,
                "query": sequence[-1],
                "answer": sequence[target_index],
                "target_index": target_index,
                "prompt": render_prompt(task, sequence),
            }
        )
    return items
