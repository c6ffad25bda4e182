"""Language models posym probes offline: a local Hugging Face causal LM, or an OpenAI-compatible chat endpoint.

* A **local model** is a directory already on disk (weights are never downloaded: ``local_files_only=True``;
  safetensors only, nothing is unpickled). :func:`answer` gives, for a prompt and a list of candidate answers,

  - the model's greedy continuation, cut to its first whitespace-separated word with quotes and punctuation
    stripped (:func:`parse_answer`);
  - the most probable candidate: the one whose whole continuation (separator + candidate, e.g. ``" c2"``) has the
    highest **sum of next-token log-probabilities over its tokens**. When every candidate is one token this is the
    argmax of the next-token logits over the candidates; when a tokenizer splits a candidate (``c2`` → ``c`` +
    ``2``), the first token alone would tie every candidate sharing it, so the full continuation is scored.

  The candidates of a prompt are scored together, as one batch over copies of the prompt's key/value cache, so
  each prompt passes through the model once. Prompts themselves go one at a time, unpadded: a prompt's scores then
  never depend on which prompts share its batch (padding moves logits in the last bits and can flip near-ties).

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
from pathlib import Path
from typing import Callable

import numpy as np

log = logging.getLogger("posym.language_models")

#: Characters stripped from both ends of a reply's first word ("c2." → c2, "'y'" → y, "**o**" → o).
ANSWER_STRIP = "\"'`.,;:!?()[]{}<>*"
#: Characters of a prompt's end that candidates are tokenised after (:func:`continuations`).
CONTEXT_CHARS = 64
#: Candidate prefixes scored per forward pass: bounds the copies of the prompt's key/value cache held at once.
CANDIDATE_ROWS = 32


class ProbeError(RuntimeError):
    """A probe cannot run as configured (no such model directory, no chat template, endpoint failures)."""


def parse_answer(text: str) -> str:
    """The first whitespace-separated word of a reply, with surrounding quotes and punctuation removed ("" if none)."""
    words = text.split()
    return words[0].strip(ANSWER_STRIP) if words else ""


# ------------------------------------------------------------------------------------------- local models


@dataclass
class LocalModel:
    """A loaded causal LM and its tokenizer. ``chat``: wrap each prompt as one user turn of the chat template."""

    model: object
    tokenizer: object
    name: str
    chat: bool = False

    @property
    def device(self):
        return next(self.model.parameters()).device

    @property
    def separator(self) -> str:
        """What precedes the answer: a space after the raw prompt's ``Output:``, nothing after a chat header."""
        return "" if self.chat else " "

    def prompt_text(self, prompt: str) -> str:
        if not self.chat:
            return prompt
        messages = [{"role": "user", "content": prompt}]
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    def prompt_ids(self, text: str) -> list[int]:
        """Token ids of a prompt text; the tokenizer's special tokens (e.g. BOS) only for raw prompts, a chat template
        writes its own."""
        return self.tokenizer(text, add_special_tokens=not self.chat)["input_ids"]

    def stop_ids(self) -> set[int]:
        """End-of-sequence ids of the tokenizer and the generation config (which may list several)."""
        ids = set()
        for value in (self.tokenizer.eos_token_id, getattr(self.model.generation_config, "eos_token_id", None)):
            ids.update(value if isinstance(value, (list, tuple)) else [value])
        return ids - {None}


def load_local_model(
    path: str | os.PathLike,
    device: str = "auto",
    dtype: str = "auto",
    chat_template: str = "auto",
    name: str | None = None,
) -> LocalModel:
    """Load a causal LM and tokenizer from a local directory; nothing is ever fetched from the Hub.

    ``chat_template``: "on" / "off", or "auto" = use the tokenizer's chat template when it has one (instruct
    models were probed through chat APIs in the paper; base models get the raw few-shot prompt).
    """
    path = Path(path)
    if not path.is_dir():
        raise ProbeError(f"{path}: not a directory; llm.model must be a local Hugging Face model directory")
    import torch

    try:
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError:
        raise ProbeError("local models need transformers: pip install 'posym[llm]'") from None
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    kwargs = {} if dtype == "auto" else {"dtype": getattr(torch, dtype)}
    # safetensors only: a pytorch_model.bin would be unpickled (torch.load), and posym unpickles nothing
    try:
        model = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, use_safetensors=True, **kwargs)
    except OSError as err:
        raise ProbeError(f"{path}: no usable safetensors weights ({err}); posym loads no pickled .bin weights") from err
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    has_template = bool(getattr(tokenizer, "chat_template", None))
    if chat_template == "on" and not has_template:
        raise ProbeError(f"{path}: the tokenizer has no chat template (use chat_template off or auto)")
    chat = chat_template == "on" or (chat_template == "auto" and has_template)
    log.info("loaded %s on %s (%s, chat template %s)", path, device, model.dtype, "on" if chat else "off")
    return LocalModel(model=model.to(device).eval(), tokenizer=tokenizer, name=name or path.name, chat=chat)


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
    """(greedy answer, most probable candidate) for one prompt: one forward pass over the prompt, then short
    continuations from copies of its key/value cache. Ties go to the candidate listed first."""
    import torch

    text = local.prompt_text(prompt)
    prompt_ids = local.prompt_ids(text)
    with torch.no_grad():
        out = local.model(input_ids=torch.tensor([prompt_ids], device=local.device), use_cache=True)
        first = torch.log_softmax(out.logits[0, -1].float(), dim=-1)
        scores = candidate_scores(local, out.past_key_values, first, continuations(local, text, candidates))
        greedy = greedy_answer(local, out.past_key_values, first, max_new_tokens)
    return greedy, candidates[int(np.argmax(scores))]


def candidate_scores(local: LocalModel, cache, first: "torch.Tensor", conts: list[list[int]]) -> np.ndarray:
    """Log-probability of each continuation after the prompt whose cache is ``cache`` (left untouched).

    ``first`` holds the prompt's next-token log-probabilities. Only continuations of two or more tokens need a
    forward pass, one row per distinct prefix ``c[:-1]`` (e.g. one per first letter for ``c2``-style splits).
    """
    import torch

    scores = np.array([float(first[c[0]]) for c in conts])
    prefixes = list(dict.fromkeys(tuple(c[:-1]) for c in conts if len(c) > 1))
    logprobs = {}
    for start in range(0, len(prefixes), CANDIDATE_ROWS):
        chunk = prefixes[start : start + CANDIDATE_ROWS]
        width = max(map(len, chunk))
        rows = torch.tensor([list(p) + [p[-1]] * (width - len(p)) for p in chunk], device=local.device)  # right-padded
        repeated = copy.deepcopy(cache)
        repeated.batch_repeat_interleave(len(chunk))
        out = torch.log_softmax(local.model(input_ids=rows, past_key_values=repeated).logits.float(), dim=-1)
        logprobs.update(zip(chunk, out))
    for k, c in enumerate(conts):
        if len(c) > 1:
            row = logprobs[tuple(c[:-1])]
            scores[k] += sum(float(row[j - 1, c[j]]) for j in range(1, len(c)))
    return scores


def greedy_answer(local: LocalModel, cache, first: "torch.Tensor", max_new_tokens: int) -> str:
    """Greedy decoding for at most ``max_new_tokens`` tokens, stopping at an end-of-sequence token or once the
    first word is complete; the parsed first word. Extends ``cache`` in place."""
    import torch

    stop = local.stop_ids()
    generated: list[int] = []
    next_id = int(first.argmax())
    for step in range(max_new_tokens):
        if next_id in stop:
            break
        generated.append(next_id)
        text = local.tokenizer.decode(generated, skip_special_tokens=True)
        if len(text.split()) > 1 or (text.strip() and text[-1].isspace()) or step + 1 == max_new_tokens:
            break
        out = local.model(
            input_ids=torch.tensor([[next_id]], device=local.device), past_key_values=cache, use_cache=True
        )
        cache = out.past_key_values
        next_id = int(out.logits[0, -1].argmax())
    return parse_answer(local.tokenizer.decode(generated, skip_special_tokens=True))


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
