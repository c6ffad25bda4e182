"""Language models posym probes offline: a local Hugging Face causal LM, or an OpenAI-compatible chat endpoint.

* A **local model** (:mod:`posym.lm.local`) is a directory already on disk, loaded offline. :func:`answer` gives, for a prompt and a list of candidate answers,

  - the model's greedy continuation, cut to its first whitespace-separated word with quotes and punctuation
    stripped (:func:`parse_answer`);
  - the most probable candidate: the one whose whole continuation (separator + candidate, e.g. ``" c2"``) has the
    highest **sum of next-token log-probabilities over its tokens**. When every candidate is one token this is the
    argmax of the next-token logits over the candidates; when a tokenizer splits a candidate (``c2`` → ``c`` +
    ``2``), the first token alone would tie every candidate sharing it, so the full continuation is scored.

  Prompts go through the model in batches (:func:`answer_batch`): their shared beginning (instructions and
  few-shot examples) once, their own ends padded into one forward pass, the candidates' further tokens as one batch
  over branches of the prompts' key/value caches, then batched greedy steps. Padding moves logits in their last
  bits, so a near-tie can resolve differently in a batch of several than alone (a batch of one is one unpadded
  pass); batches follow the items' order, so runs repeat exactly.

* An **endpoint** (``POST {base}/chat/completions``, temperature 0, a few tokens) gives greedy answers only (no
  logits). Base URL and key come from environment variables, never from config files.

``transformers`` is imported only when a local model is loaded, so the rest of posym works without it.
"""

from __future__ import annotations

import copy
import itertools
import json
import logging
import os
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Callable

import numpy as np

from posym.lm.local import LocalModel

log = logging.getLogger("posym.a.llm")

#: Characters stripped from both ends of a reply's first word ("c2." → c2, "'y'" → y, "**o**" → o).
ANSWER_STRIP = "\"'`.,;:!?()[]{}<>*"
#: Characters of a prompt's end that candidates are tokenised after (:func:`continuations`).
CONTEXT_CHARS = 64
#: Candidate prefixes scored per forward pass: bounds the copies of the prompt's key/value cache held at once.
CANDIDATE_ROWS = 32


class ProbeError(RuntimeError):
    """A probe cannot run as configured (endpoint failures); a local model that cannot load raises
    :class:`posym.lm.local.LocalModelError`."""


def parse_answer(text: str) -> str:
    """The first whitespace-separated word of a reply, with surrounding quotes and punctuation removed ("" if none)."""
    words = text.split()
    return words[0].strip(ANSWER_STRIP) if words else ""


def continuations(local: LocalModel, text: str, candidates: list[str]) -> list[list[int]]:
    """Token ids of each candidate as the continuation of ``text`` (separator included, e.g. ``" c2"``).

    Tokenised in context, as the ids of context + separator + candidate minus the context's own. Tokenizers only
    look a few characters across a boundary, so the last :data:`CONTEXT_CHARS` characters of the prompt stand in
    for all of it (a 1000-token prompt times 200 candidates would cost more than the model). Should a tokenizer
    merge the candidate into the context's last token, the candidate is tokenised alone, with a warning.
    """
    context = text[-CONTEXT_CHARS:]
    context_ids = local.tokenizer(context, add_special_tokens=False)["input_ids"]
    full = local.tokenizer([context + local.separator + c for c in candidates], add_special_tokens=False)["input_ids"]
    out = []
    for candidate, ids in zip(candidates, full):
        if ids[: len(context_ids)] == context_ids and len(ids) > len(context_ids):
            out.append(ids[len(context_ids) :])
        else:
            log.warning("candidate %r merges with the prompt's last token; scored as tokenised alone", candidate)
            out.append(local.tokenizer(local.separator + candidate, add_special_tokens=False)["input_ids"])
    return out


def answer(local: LocalModel, prompt: str, candidates: list[str], max_new_tokens: int) -> tuple[str, str]:
    """(greedy answer, most probable candidate) for one prompt, as :func:`answer_batch` of one."""
    return answer_batch(local, [prompt], [candidates], max_new_tokens)[0]


def answer_batch(
    local: LocalModel, prompts: list[str], candidates: list[list[str]], max_new_tokens: int
) -> list[tuple[str, str]]:
    """(greedy answer, most probable candidate) of each prompt, for a batch of prompts passed through the model
    together. Ties go to the candidate listed first.

    The prompts' common beginning (the probe's instructions and few-shot examples) passes through the model once;
    then their different ends, padded to one length, as one batch; then each candidate token after the first, as
    one batch over branches of the prompts' key/value caches; then at most ``max_new_tokens`` batched greedy steps.
    Padding moves logits in their last bits, so a near-tie may resolve differently in a batch than alone (a batch
    of one is one unpadded pass); in a sliding-window model (Gemma-3) the padding also moves the window's far edge
    by its few tokens. Batches follow the items' order, so a run gives the same answers every time.
    """
    import torch

    texts = [local.prompt_text(p) for p in prompts]
    prompt_ids = [local.prompt_ids(t) for t in texts]
    shared = _shared_length(prompt_ids) if len(prompt_ids) > 1 else 0
    ends = [ids[shared:] for ids in prompt_ids]
    width = max(map(len, ends))
    mask = torch.tensor([[1] * shared + [0] * (width - len(e)) + [1] * len(e) for e in ends], device=local.device)
    padded = torch.tensor([[e[0]] * (width - len(e)) + e for e in ends], device=local.device)
    with torch.no_grad():
        cache = None
        if shared:
            start = local.model(input_ids=torch.tensor([prompt_ids[0][:shared]], device=local.device), use_cache=True)
            cache = start.past_key_values
            cache.batch_repeat_interleave(len(prompts))
        out = local.model(
            input_ids=padded,
            attention_mask=mask,
            position_ids=_positions(mask)[:, shared:],
            past_key_values=cache,
            use_cache=True,
            logits_to_keep=1,
        )
        first = torch.log_softmax(out.logits[:, -1].float(), dim=-1)
        conts = [continuations(local, text, c) for text, c in zip(texts, candidates)]
        scores = candidate_scores(local, out.past_key_values, mask, first, conts)
        greedy = greedy_answers(local, out.past_key_values, mask, first, max_new_tokens)
    return [(g, c[int(np.argmax(s))]) for g, c, s in zip(greedy, candidates, scores)]


def _shared_length(prompt_ids: list[list[int]]) -> int:
    """Length of the token ids every prompt starts with, leaving each prompt at least one token of its own."""
    shortest = min(map(len, prompt_ids))
    for k in range(shortest - 1):
        if any(ids[k] != prompt_ids[0][k] for ids in prompt_ids):
            return k
    return shortest - 1


def _positions(mask: "torch.Tensor") -> "torch.Tensor":
    """Position ids of padded rows: each row counts its real tokens from 0 (a pad takes its predecessor's)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def _branch(cache, rows: "torch.Tensor | None" = None):
    """A cache (of the given rows of ``cache``, repeated as listed) that later steps extend without touching
    ``cache``: the layers are copied shallowly, and extending or selecting rows makes new tensors."""
    branch = copy.copy(cache)
    branch.layers = [copy.copy(layer) for layer in cache.layers]
    if rows is not None:
        branch.reorder_cache(rows)
    return branch


def candidate_scores(
    local: LocalModel, cache, mask: "torch.Tensor", first: "torch.Tensor", conts: list[list[list[int]]]
) -> list[np.ndarray]:
    """Log-probability of each continuation after each prompt of a batch whose cache is ``cache`` (left untouched).

    ``first`` holds the prompts' next-token log-probabilities, ``mask`` their attention mask. Only continuations
    of two or more tokens need a forward pass, for each prompt and distinct prefix ``c[:-1]`` (e.g. one per first
    letter for ``c2``-style splits): all of them in one pass where a 4-D mask can express the model's attention,
    else one row per prefix on a branch of its prompt's cache.
    """
    import torch

    scores = [np.array([float(first[b, c[0]]) for c in row]) for b, row in enumerate(conts)]
    prefixes = list(dict.fromkeys((b, tuple(c[:-1])) for b, row in enumerate(conts) for c in row if len(c) > 1))
    if not prefixes:
        return scores
    logprobs = (_prefix_logprobs_as_tree if _plain_causal(local.model) else _prefix_logprobs_on_branches)(
        local, cache, mask, prefixes
    )
    for b, row in enumerate(conts):
        for k, c in enumerate(row):
            if len(c) > 1:
                following = logprobs[(b, tuple(c[:-1]))]
                scores[b][k] += sum(float(following[j - 1, c[j]]) for j in range(1, len(c)))
    return scores


def _plain_causal(model) -> bool:
    """Whether every layer attends causally to the whole context (no sliding window): then a custom 4-D attention
    mask says all there is to say about which tokens a token sees."""
    config = model.config
    return not getattr(config, "sliding_window", None) and "sliding_attention" not in (getattr(config, "layer_types", None) or [])


def _prefix_logprobs_as_tree(local: LocalModel, cache, mask: "torch.Tensor", prefixes: list) -> dict:
    """Next-token log-probabilities after each (prompt, prefix), all prefixes of a prompt in one row of one forward
    pass: each prefix's tokens sit at the positions they would follow the prompt at, and a 4-D attention mask lets a
    token see its prompt and the tokens before it in its own prefix only (the prompts' cache is extended, not
    copied per prefix, and is left untouched)."""
    import torch

    chains: dict[int, list[tuple[int, ...]]] = {}
    for b, prefix in prefixes:
        chains.setdefault(b, []).append(prefix)
    batch, context = mask.shape
    width = max(sum(map(len, c)) for c in chains.values())
    ids = torch.zeros(batch, width, dtype=torch.long, device=local.device)
    positions = torch.zeros(batch, width, dtype=torch.long, device=local.device)
    sees = torch.zeros(batch, 1, width, context + width, dtype=torch.bool, device=local.device)
    sees[:, 0, :, :context] = mask[:, None, :].bool()
    sees[:, 0, torch.arange(width), context + torch.arange(width)] = True  # padding sees itself only
    where = {}
    lengths = mask.sum(-1).tolist()
    for b, row_chains in chains.items():
        at = 0
        for prefix in row_chains:
            span = torch.arange(at, at + len(prefix), device=local.device)
            ids[b, span] = torch.tensor(prefix, device=local.device)
            positions[b, span] = lengths[b] + torch.arange(len(prefix), device=local.device)
            own = torch.ones(len(prefix), len(prefix), dtype=torch.bool, device=local.device).tril()
            sees[b, 0, span, context + at : context + at + len(prefix)] = own
            where[(b, prefix)] = span
            at += len(prefix)
    dtype = next(local.model.parameters()).dtype
    additive = torch.zeros(sees.shape, dtype=dtype, device=local.device).masked_fill(~sees, torch.finfo(dtype).min)
    out = local.model(input_ids=ids, attention_mask=additive, position_ids=positions, past_key_values=_branch(cache))
    logprobs = torch.log_softmax(out.logits.float(), dim=-1)
    return {key: logprobs[key[0], span] for key, span in where.items()}


def _prefix_logprobs_on_branches(local: LocalModel, cache, mask: "torch.Tensor", prefixes: list) -> dict:
    """Next-token log-probabilities after each (prompt, prefix), one row per prefix on a branch of its prompt's
    cache, :data:`CANDIDATE_ROWS` rows at a time (for sliding-window models, whose masks a 4-D mask cannot state)."""
    import torch

    logprobs = {}
    for start in range(0, len(prefixes), CANDIDATE_ROWS):
        chunk = prefixes[start : start + CANDIDATE_ROWS]
        rows = torch.tensor([b for b, _ in chunk], device=local.device)
        width = max(len(p) for _, p in chunk)
        ids = torch.tensor([list(p) + [p[-1]] * (width - len(p)) for _, p in chunk], device=local.device)  # right-pad
        chunk_mask = torch.cat([mask[rows], torch.ones_like(ids)], dim=1)
        positions = mask[rows].sum(-1, keepdim=True) + torch.arange(width, device=local.device)
        branch = _branch(cache, rows)
        out = local.model(input_ids=ids, attention_mask=chunk_mask, position_ids=positions, past_key_values=branch)
        logprobs.update(zip(chunk, torch.log_softmax(out.logits.float(), dim=-1)))
    return logprobs


def greedy_answers(
    local: LocalModel, cache, mask: "torch.Tensor", first: "torch.Tensor", max_new_tokens: int
) -> list[str]:
    """Greedy decoding of every prompt of a batch for at most ``max_new_tokens`` tokens; a prompt stops at an
    end-of-sequence token or once its first word is complete. The parsed first words. Extends ``cache`` in place."""
    import torch

    stop = local.stop_ids()
    generated: list[list[int]] = [[] for _ in range(len(first))]
    running = list(range(len(first)))
    next_ids = first.argmax(-1).tolist()
    for step in range(max_new_tokens):
        still = []
        for b in running:
            if next_ids[b] in stop:
                continue
            generated[b].append(next_ids[b])
            text = local.tokenizer.decode(generated[b], skip_special_tokens=True)
            if not (len(text.split()) > 1 or (text.strip() and text[-1].isspace())):
                still.append(b)
        running = still
        if not running or step + 1 == max_new_tokens:
            break
        # every row steps (a finished row's step is discarded): the cache stays one tensor per layer
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        step_ids = torch.tensor([[i] for i in next_ids], device=local.device)
        out = local.model(
            input_ids=step_ids,
            attention_mask=mask,
            position_ids=mask.sum(-1, keepdim=True) - 1,
            past_key_values=cache,
            use_cache=True,
        )
        cache = out.past_key_values
        next_ids = out.logits[:, -1].argmax(-1).tolist()
    return [parse_answer(local.tokenizer.decode(g, skip_special_tokens=True)) for g in generated]


# --------------------------------------------------------------------------------------- HTTP endpoint


class EndpointError(ProbeError):
    """The endpoint refused a request, or kept failing after every retry."""


#: Request timeout, conflict, rate limit and server-side failures: worth another try.
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


@dataclass
class EndpointClient:
    """Single-turn, temperature-0 chat completions from an OpenAI-compatible server.

    ``base_url`` ends with the API version, as OpenAI clients expect (``https://host/v1``). The statuses in
    :data:`RETRYABLE_STATUS`, timeouts and dropped connections are retried ``retries`` times, waiting
    ``backoff · 2^attempt`` seconds (at most ``max_delay``; a server's ``Retry-After`` is honoured up to that bound).
    Any other error stops at once.
    """

    base_url: str
    model: str
    api_key: str | None = None
    max_tokens: int = 5
    timeout: float = 60.0
    retries: int = 5
    backoff: float = 1.0
    max_delay: float = 60.0
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def from_environment(cls, model: str, url_env: str, key_env: str, **kwargs) -> "EndpointClient":
        """A client whose base URL and key come from the named environment variables (the key may be unset)."""
        url = os.environ.get(url_env, "").strip()
        if not url:
            raise EndpointError(f"${url_env} is not set: export the endpoint's base URL, e.g. https://host/v1")
        return cls(base_url=url, model=model, api_key=os.environ.get(key_env) or None, **kwargs)

    def complete(self, prompt: str) -> str:
        """The text of the reply to ``prompt`` sent as one user message."""
        body = {
            "model": self.model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": self.max_tokens,
        }
        reply = self._post("/chat/completions", body)
        try:
            return reply["choices"][0]["message"]["content"] or ""
        except (KeyError, IndexError, TypeError):
            raise EndpointError(f"unexpected reply from {self.base_url}: {json.dumps(reply)[:300]}") from None

    def _post(self, path: str, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        url = self.base_url.rstrip("/") + path
        request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
        for attempt in itertools.count():
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read().decode("utf-8"))
            except urllib.error.HTTPError as err:
                detail = err.read().decode("utf-8", "replace")[:300]
                if err.code not in RETRYABLE_STATUS:
                    raise EndpointError(f"{url}: HTTP {err.code} {err.reason}: {detail}") from None
                problem, wait = f"HTTP {err.code}: {detail}", _retry_after(err.headers)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                problem, wait = f"{type(err).__name__}: {getattr(err, 'reason', err)}", None
            except json.JSONDecodeError as err:
                raise EndpointError(f"{url}: the reply is not JSON ({err})") from None
            if attempt == self.retries:
                raise EndpointError(f"{url}: gave up after {self.retries + 1} attempts; last: {problem}")
            delay = min(max(self.backoff * 2**attempt, wait or 0.0), self.max_delay)
            log.warning("%s (attempt %d of %d); retrying in %.1f s", problem, attempt + 1, self.retries + 1, delay)
            self.sleep(delay)


def _retry_after(headers) -> float | None:
    try:
        return float(headers.get("Retry-After"))
    except (TypeError, ValueError):
        return None
