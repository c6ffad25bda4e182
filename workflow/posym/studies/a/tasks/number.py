"""Paper A's Number task (spec §A1, §A2): a query offset points back along offsets to a letter.

The target window holds 8 letters; the pre-target window and the query hold backward offsets '1'..'16'; the
chain from the query follows the offsets until it lands on a letter, the answer. Purely positional: the answer
is found by counting places, which is why its model grows positional heads.
"""

from __future__ import annotations

import random
import string

import numpy as np

from posym.data.tasks import PAD, TaskData, Vocab

from .multihop import CONTEXT, HOP_LENS, QUERY_BLOCK, SEQ_LEN, WINDOW, MultiHopTask, draw_middle, flag, on_chain_steps, padded_chain

#: The 120 letter tokens: a..z, then the lowercase bigrams aa, ab, ..., az, ba, ..., cut at 120, i.e. ending with
#: ``dp`` (spec §A2; the authors index ``ascii_letters`` with range(26) twice, so lowercase).
LETTERS = tuple((list(string.ascii_lowercase) + [a + b for a in string.ascii_lowercase for b in string.ascii_lowercase])[:120])
MAX_OFFSET = CONTEXT  # offsets are '1'..'16'
FIRST_LETTER_ID = 1 + MAX_OFFSET  # 17: '1'..'16' take ids 1..16, as the authors' tokenizer does

#: 32-bit MT19937 outputs kept per sample to replay NumPy's bounded draws (about 19 are used on average; a sample
#: that would need more is redrawn with ``randint`` itself, see :func:`back_pointers`).
RAW_DRAWS = 48

#: Letters of the LLM probes (spec §A10.2).
PROBE_LETTERS = string.ascii_lowercase

PROBE_PROMPT = """You will be given a sequence of space-separated tokens.
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


def back_pointers(raw: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Replay ``np.random.randint(0, np.arange(1, 18))[:-1]`` after ``np.random.seed(seed)``, for many seeds.

    ``raw`` holds each seed's first 32-bit MT19937 outputs. NumPy's legacy bounded integers draw ``v & mask``
    (mask = the smallest 2^b - 1 covering the range) until ``v`` is in range, one 32-bit output per try, and
    draw nothing for a range of one value. Replaying that on all samples at once is what makes the
    generator fast; ``tests/studies/a/test_a_tasks.py`` checks it against ``randint`` itself.
    """
    n = len(raw)
    pointers = np.zeros((n, SEQ_LEN), dtype=np.int64)
    cursor = np.zeros(n, dtype=np.int64)
    for position in range(2, SEQ_LEN):  # position 0 is fixed and position 1 can only point to 0
        largest = position - 1
        mask = (1 << largest.bit_length()) - 1
        pending = np.flatnonzero(cursor < raw.shape[1])
        while pending.size:
            value = raw[pending, cursor[pending]] & mask
            cursor[pending] += 1
            accepted = value <= largest
            pointers[pending[accepted], position] = value[accepted]
            pending = pending[~accepted & (cursor[pending] < raw.shape[1])]
    exhausted = np.flatnonzero(cursor >= raw.shape[1])
    if exhausted.size:  # rare: replaying ran out of outputs; ask NumPy directly (same draws, slower)
        legacy = np.random.RandomState()
        bounds = np.arange(1, SEQ_LEN + 1)
        for row in exhausted:
            legacy.seed(int(seeds[row]))
            pointers[row, 1:] = legacy.randint(0, bounds)[:-1]
    return pointers


class NumberTask(MultiHopTask):
    name = "number"
    #: The answer's attributes the balancing table enumerates: (target_pos 0..7, letter 0..119, hop_len 1..4).
    combination_counts = (WINDOW, len(LETTERS), len(HOP_LENS))
    fig3_input = "n h n v h y r s 6 3 2 7 7 8 4 7 2"  # 4 hops, answer n
    fig1_example = {"tokens": "C B A 1 4 1 3 2 1".split(), "window": 3}
    colour = "#c0392b"
    probe_stream = 0
    probe_prompt = PROBE_PROMPT
    probe_examples = (("a z b y c x d w 5", "y"), ("v t k g n k o h m p 4", "o"), ("w y b c v t r i p p 10", "w"))

    def build_vocabulary(self) -> Vocab:
        """137 tokens: padding, the offsets '1'..'16', the 120 letters."""
        return Vocab(tuple([PAD] + [str(k) for k in range(1, MAX_OFFSET + 1)] + list(LETTERS)))

    def unpack(self, codes: np.ndarray) -> dict[str, np.ndarray]:
        target, letter, hop = np.unravel_index(codes, self.combination_counts)
        return {"target_pos": target, "letter": letter, "hops": hop + 1}

    def labels_of(self, parts: dict[str, np.ndarray]) -> np.ndarray:
        return FIRST_LETTER_ID + parts["letter"]

    def make_rows(self, parts: dict[str, np.ndarray], seeds: np.ndarray) -> np.ndarray:
        """Random calls per sample, in the authors' order (spec §A2):
          1. Python: ``sample(range(8, 16), h-1)``, sorted = the intermediate hop positions;
          2. Python: ``choices(letters, k=8)`` = the target window (the answer then overwrites its slot);
          3. NumPy legacy: ``randint(0, arange(1, 18))`` = one back-pointer per position (position i points to a
             uniform earlier position 0..i-1; the 17th draw is discarded). The chain overwrites the pointers of the
             query and the intermediate hops; each pointer becomes the offset i - pointer.
        """
        n = len(seeds)
        py_random = random.Random()
        bit_generator = np.random.MT19937()
        legacy = np.random.RandomState(bit_generator)  # reseeding it is exactly ``np.random.seed``
        letter_choices = range(len(LETTERS))
        window: list[int] = []
        chains: list[int] = []
        raw = np.empty((n, RAW_DRAWS), dtype=np.uint64)
        for k, (target, hops, seed) in enumerate(zip(parts["target_pos"].tolist(), parts["hops"].tolist(), seeds.tolist())):
            py_random.seed(seed)
            middle = draw_middle(py_random, hops)
            window += py_random.choices(letter_choices, k=WINDOW)
            chains += padded_chain(target, middle)
            legacy.seed(seed)
            raw[k] = bit_generator.random_raw(RAW_DRAWS)

        window_letters = np.array(window, dtype=np.int64).reshape(n, WINDOW)
        window_letters[np.arange(n), parts["target_pos"]] = parts["letter"]
        pointers = back_pointers(raw, seeds)
        for rows, source, dest in on_chain_steps(np.array(chains, dtype=np.int64).reshape(n, -1)):
            pointers[rows, source] = dest

        tokens = np.empty((n, SEQ_LEN), dtype=np.uint8)
        tokens[:, :WINDOW] = FIRST_LETTER_ID + window_letters
        tokens[:, WINDOW:] = np.arange(WINDOW, SEQ_LEN) - pointers[:, WINDOW:]  # offset k has id k
        return tokens

    def follow(self, tokens: np.ndarray, problem: np.ndarray, reasons: list[str]):
        """Follow the offsets from the query back to a letter (spec §A1)."""
        n, length = tokens.shape
        rows = np.arange(n)
        is_letter = tokens >= FIRST_LETTER_ID
        self.check_layout(tokens, problem, reasons, ~is_letter, "offsets and all earlier ones letters")
        offsets = np.where(is_letter, 0, tokens.astype(np.int64))
        flag(problem, reasons, (offsets > np.arange(length)).any(axis=1), "an offset jumps before the start")

        current = np.full(n, length - 1)
        hops = np.zeros(n, dtype=np.int64)
        path = np.full((n, QUERY_BLOCK), -1, dtype=np.int64)
        for step in range(QUERY_BLOCK):  # every jump goes back at least one place, so ≤ 9 jumps leave the offsets
            jumping = ~is_letter[rows, current] & (problem < 0)
            if not jumping.any():
                break
            current = np.where(jumping, current - offsets[rows, current], current)
            path[jumping, step] = current[jumping]
            hops += jumping
        return hops, current, path

    def filler_pool(self, data: TaskData) -> np.ndarray:
        """Every letter: a letter ends any chain that reaches it, and none of the prepended tokens is reached."""
        allowed = np.zeros((len(data), len(self.vocabulary)), dtype=bool)
        allowed[:, FIRST_LETTER_ID:] = True
        return allowed

    def uniform_fillers(self, data: TaskData, extra: int, draw: np.random.Generator) -> np.ndarray:
        """Uniform letters of the 120-letter vocabulary (PROPOSED in the spec)."""
        return FIRST_LETTER_ID + draw.integers(0, len(LETTERS), size=(len(data), extra))

    def is_answer_id(self, ids: np.ndarray) -> np.ndarray:
        return np.asarray(ids) >= FIRST_LETTER_ID

    def is_answer_token(self, token: str) -> bool:
        return not token.isdigit()

    def hop(self, tokens: list[str]) -> list[str]:
        from ..theory import index

        return index(tokens)

    def follow_example(self, tokens: list[str]) -> list[int]:
        """An integer token sends the chain that many places left; a letter ends it."""
        chain, current = [], len(tokens) - 1
        while tokens[current].isdigit():
            current -= int(tokens[current])
            if current < 0:
                raise ValueError(f"{tokens}: a hop jumps before the start")
            chain.append(current)
        return chain

    def probe_sequence(self, draw: np.random.Generator, window: int) -> tuple[list[str], int]:
        """``window`` lowercase letters (repeats allowed), then the query ``n`` ~ U{1..window}; the answer is the
        token ``n`` places left of the query (PROPOSED in spec §A10.2)."""
        sequence = [PROBE_LETTERS[i] for i in draw.integers(0, len(PROBE_LETTERS), size=window)]
        steps = int(draw.integers(1, window + 1))
        return sequence + [str(steps)], window - steps

    def solve_probe(self, tokens: list[str]) -> str:
        *window, query = tokens
        steps = int(query)
        if not 1 <= steps <= len(window):
            raise ValueError(f"query {query} points outside the window")
        return window[len(window) - steps]


TASK = NumberTask()
