"""Paper A's Letter task (spec §A1, §A2): a query pair names, by its second letter, the one earlier token starting
with that letter, until a (letter, digit) pair, the answer.

The target window holds (letter, digit) pairs over 8 letters and digits 1..8; the pre-target window and the query
hold (letter, letter) pairs. Purely symbolic: the answer is found by matching contents, wherever they sit.
"""

from __future__ import annotations

import itertools
import random
import string

import numpy as np

from posym.data.tasks import PAD, TaskData, Vocab

from .multihop import CONTEXT, HOP_LENS, QUERY_BLOCK, SEQ_LEN, WINDOW, MultiHopTask, draw_middle, flag, on_chain_steps, padded_chain

LETTERS = tuple(string.ascii_lowercase[:8])
DIGITS = tuple(range(1, 9))
FIRST_PAIR_ID = 1 + len(LETTERS) * len(DIGITS)  # 65: (letter, letter) pairs start here

#: Letters and digits of the LLM probes (spec §A10.2). Table 2's examples use 1..9 (``w9``, ``a4``, ``d1``), never 0.
PROBE_LETTERS = string.ascii_lowercase
PROBE_DIGITS = "123456789"

PROBE_PROMPT = """You will be given a sequence of space-separated tokens.
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


def letter_digit_id(letter, digit):
    """Id of the pair (letter index 0..7, digit 1..8); works on arrays."""
    return 1 + letter * len(DIGITS) + (digit - 1)


def letter_letter_id(first, second):
    """Id of the pair (letter index, letter index); works on arrays."""
    return FIRST_PAIR_ID + first * len(LETTERS) + second


def parts_of(ids):
    """(first letter index, second part) of ids: the second part is a letter index for (letter, letter) pairs and
    the digit minus one for (letter, digit) pairs."""
    ids = np.asarray(ids, dtype=np.int64)
    pair_of_letters = ids >= FIRST_PAIR_ID
    index = np.where(pair_of_letters, ids - FIRST_PAIR_ID, ids - 1)
    per_first = np.where(pair_of_letters, len(LETTERS), len(DIGITS))
    return index // per_first, index % per_first


class LetterTask(MultiHopTask):
    name = "letter"
    #: The answer's attributes the balancing table enumerates: (target_pos 0..7, letter 0..7, digit 1..8, hop_len 1..4).
    combination_counts = (WINDOW, len(LETTERS), len(DIGITS), len(HOP_LENS))
    fig3_input = "e1 b2 e1 g6 a2 b2 e1 g6 be db ca ge eb hc dg fh eh"  # 3 hops, answer a2
    fig1_example = {"tokens": "C2 B1 A3 FA EC DE HF GD IG".split(), "window": 3}
    colour = "#2471a3"
    probe_stream = 1
    probe_prompt = PROBE_PROMPT
    probe_examples = (
        ("a4 b3 c2 d1 fc", "c2"),
        ("w9 t7 l5 g1 n4 l6 u9 k7 m5 p8 gk", "k7"),
        ("q5 r7 x4 t7 f4 k7 q4 u2 u3 r5 ex", "x4"),
    )

    def build_vocabulary(self) -> Vocab:
        """129 tokens: padding, the 64 (letter, digit) pairs, the 64 (letter, letter) pairs."""
        tokens = [PAD] + [f"{a}{d}" for a, d in itertools.product(LETTERS, DIGITS)]
        tokens += [a + b for a, b in itertools.product(LETTERS, LETTERS)]
        return Vocab(tuple(tokens))

    def unpack(self, codes: np.ndarray) -> dict[str, np.ndarray]:
        target, letter, digit, hop = np.unravel_index(codes, self.combination_counts)
        return {"target_pos": target, "letter": letter, "digit": digit + 1, "hops": hop + 1}

    def labels_of(self, parts: dict[str, np.ndarray]) -> np.ndarray:
        return letter_digit_id(parts["letter"], parts["digit"])

    def make_rows(self, parts: dict[str, np.ndarray], seeds: np.ndarray) -> np.ndarray:
        """Random calls per sample, all Python ``random``, in the authors' order (spec §A2):
          1. ``sample(range(8, 16), h-1)``, sorted = intermediate hop positions;
          2. ``sample(others, h-1)`` = the letters of the intermediate hops, ``others`` being the 7 letters other
             than the answer's, in alphabetical order; the rest (``fillers``, 8-h letters) never lies on the chain;
          3. ``choices(fillers, k=16)`` then ``choice(fillers)`` = first letters of positions 0..15 and 16;
          4. ``choices(fillers, k=17)`` = second letters;
          5. ``choices(1..8, k=8)`` = the digits of the target window.
        Then the chain's first letters are set (answer letter at the target, hop letters at the hops), each chain
        position's second letter is set to the next chain position's first letter, and the answer's digit is set.
        NumPy's generator is reseeded by the authors but draws nothing here, so it is skipped.
        """
        n = len(seeds)
        py_random = random.Random()
        letters = range(len(LETTERS))
        first: list[int] = []
        second: list[int] = []
        digits: list[int] = []
        chains: list[int] = []
        chain_letters: list[int] = []
        rows = zip(parts["target_pos"].tolist(), parts["letter"].tolist(), parts["hops"].tolist(), seeds.tolist())
        for target, letter, hops, seed in rows:
            py_random.seed(seed)
            middle = draw_middle(py_random, hops)
            others = [x for x in letters if x != letter]
            hop_letters = py_random.sample(others, hops - 1)
            fillers = [x for x in others if x not in hop_letters]
            first += py_random.choices(fillers, k=CONTEXT)
            first.append(py_random.choice(fillers))
            second += py_random.choices(fillers, k=SEQ_LEN)
            digits += py_random.choices(DIGITS, k=WINDOW)
            chains += padded_chain(target, middle)
            chain_letters += hop_letters + [letter] + [-1] * (len(HOP_LENS) - hops)

        first_letters = np.array(first, dtype=np.int64).reshape(n, SEQ_LEN)
        second_parts = np.array(second, dtype=np.int64).reshape(n, SEQ_LEN)
        window_digits = np.array(digits, dtype=np.int64).reshape(n, WINDOW)
        chains_array = np.array(chains, dtype=np.int64).reshape(n, -1)
        chain_letters_array = np.array(chain_letters, dtype=np.int64).reshape(n, len(HOP_LENS))
        for step, (rows_, _, dest) in enumerate(on_chain_steps(chains_array)):  # letters of the positions reached
            first_letters[rows_, dest] = chain_letters_array[rows_, step]
        for rows_, source, dest in on_chain_steps(chains_array):  # each second letter names the next first letter
            second_parts[rows_, source] = first_letters[rows_, dest]
        window_digits[np.arange(n), parts["target_pos"]] = parts["digit"]

        tokens = np.empty((n, SEQ_LEN), dtype=np.uint8)
        tokens[:, :WINDOW] = letter_digit_id(first_letters[:, :WINDOW], window_digits)
        tokens[:, WINDOW:] = letter_letter_id(first_letters[:, WINDOW:], second_parts[:, WINDOW:])
        return tokens

    def follow(self, tokens: np.ndarray, problem: np.ndarray, reasons: list[str]):
        """Follow the letters from the query (spec §A1): the second letter of each pair names the first letter of
        the next, which must be the first letter of exactly one earlier token; stop on a (letter, digit) pair."""
        n, length = tokens.shape
        rows = np.arange(n)
        is_pair_of_letters = tokens >= FIRST_PAIR_ID
        self.check_layout(
            tokens, problem, reasons, is_pair_of_letters, "letter-letter pairs and all earlier ones letter-digit pairs"
        )

        first, second = parts_of(tokens)

        current = np.full(n, length - 1)
        hops = np.zeros(n, dtype=np.int64)
        path = np.full((n, QUERY_BLOCK), -1, dtype=np.int64)
        positions = np.arange(length)
        for step in range(QUERY_BLOCK):  # a chain cannot revisit a letter, so it stops within the 9 letter pairs
            jumping = is_pair_of_letters[rows, current] & (problem < 0)
            if not jumping.any():
                break
            wanted = second[rows, current]
            candidates = (first == wanted[:, None]) & (positions < current[:, None])
            count = candidates.sum(axis=1)
            flag(
                problem,
                reasons,
                jumping & (count != 1),
                "the letter a hop names is the first letter of none or several earlier tokens (not proper)",
            )
            jumping &= problem < 0
            current = np.where(jumping, candidates.argmax(axis=1), current)
            path[jumping, step] = current[jumping]
            hops += jumping
        return hops, current, path

    def chain_letters(self, data: TaskData) -> np.ndarray:
        """(N, 8) mask of the letters a sample's chain visits (the answer's included)."""
        path = self.chain_positions(data)
        rows, steps = np.nonzero(path >= 0)
        on_chain = np.zeros((len(data), len(LETTERS)), dtype=bool)
        on_chain[rows, parts_of(data.tokens[rows, path[rows, steps]])[0]] = True
        return on_chain

    def filler_pool(self, data: TaskData) -> np.ndarray:
        """(letter, digit) pairs whose letter is none of the sample's chain letters: a hop names a chain letter, which
        must start exactly one earlier token, so a filler starting with one would make the input improper."""
        allowed = np.zeros((len(data), len(self.vocabulary)), dtype=bool)
        letters, digits = np.meshgrid(np.arange(len(LETTERS)), DIGITS, indexing="ij")
        ids, letters = letter_digit_id(letters, digits).ravel(), letters.ravel()
        allowed[:, ids] = ~self.chain_letters(data)[:, letters]
        return allowed

    def uniform_fillers(self, data: TaskData, extra: int, draw: np.random.Generator) -> np.ndarray:
        """(letter, digit 1..8) pairs whose letter is none of the sample's chain letters, so the input stays proper
        and the answer unique (PROPOSED in the spec)."""
        n, n_letters = len(data), len(LETTERS)
        on_chain = self.chain_letters(data)
        # allowed letters first (ascending), then a uniform pick among the first `allowed` of them
        allowed_letters = np.argsort(on_chain, axis=1, kind="stable")
        allowed = n_letters - on_chain.sum(axis=1)
        pick = np.floor(draw.random((n, extra)) * allowed[:, None]).astype(np.int64)
        letters = np.take_along_axis(allowed_letters, pick, axis=1)
        return letter_digit_id(letters, draw.integers(1, len(DIGITS) + 1, size=(n, extra)))

    def is_answer_id(self, ids: np.ndarray) -> np.ndarray:
        ids = np.asarray(ids)
        return (ids >= 1) & (ids < FIRST_PAIR_ID)

    def is_answer_token(self, token: str) -> bool:
        return token[1:].isdigit()

    def hop(self, tokens: list[str]) -> list[str]:
        from ..theory import retrieval

        return retrieval(tokens)

    def follow_example(self, tokens: list[str]) -> list[int]:
        """A (letter, letter) token sends the chain to the one earlier token whose first character is its second;
        a (letter, digit) token ends it."""
        chain, current = [], len(tokens) - 1
        while not tokens[current][1].isdigit():
            matches = [i for i in range(current) if tokens[i][0] == tokens[current][1]]
            if len(matches) != 1:
                raise ValueError(f"{tokens}: {len(matches)} tokens start with {tokens[current][1]!r}")
            current = matches[0]
            chain.append(current)
        return chain

    def probe_sequence(self, draw: np.random.Generator, window: int) -> tuple[list[str], int]:
        """``window`` letter+digit tokens whose first letters are drawn (with repeats) from the 25 letters other than
        the target letter, which starts exactly one token at a uniform position; the query is ``Q1 Q2`` with Q2 the
        target letter and Q1 another letter, so the prompt's "only one token" holds even counting the query
        (PROPOSED in spec §A10.2)."""
        target_letter = int(draw.integers(0, len(PROBE_LETTERS)))
        others = [letter for i, letter in enumerate(PROBE_LETTERS) if i != target_letter]
        firsts = [others[i] for i in draw.integers(0, len(others), size=window)]
        target_index = int(draw.integers(0, window))
        firsts[target_index] = PROBE_LETTERS[target_letter]
        digits = [PROBE_DIGITS[i] for i in draw.integers(0, len(PROBE_DIGITS), size=window)]
        sequence = [a + d for a, d in zip(firsts, digits)]
        sequence.append(others[int(draw.integers(0, len(others)))] + PROBE_LETTERS[target_letter])
        return sequence, target_index

    def solve_probe(self, tokens: list[str]) -> str:
        *window, query = tokens
        matches = [token for token in window if token[0] == query[1]]
        if len(matches) != 1:
            raise ValueError(f"{len(matches)} tokens start with {query[1]!r}")
        return matches[0]


TASK = LetterTask()
