"""Offline substitute for paper A's frontier-LLM probes (spec §A10.2, Fig 5C/D, Table 3, claim A-7 of §A12).

Paper A asked GPT 5.4 / 5.5 and Claude Sonnet 3.7, through their closed APIs, for single-token answers to the 1-hop
Number and Letter probes of :mod:`posym.probes`. Those rows cannot be rerun offline; this module runs the same
prompts and items on a model we can reach:

* a **local Hugging Face causal LM**, given as a directory already on disk (weights are never downloaded:
  ``local_files_only=True``), scored two ways per item:

  - ``greedy``: the model's greedy continuation, cut to its first whitespace-separated word with quotes and
    punctuation stripped (:func:`parse_answer`), must equal the answer. This is the paper's protocol.
  - ``restricted``: the window's distinct tokens are the only candidates, and the one whose whole continuation
    (separator + token, e.g. ``" c2"``) is most probable wins, i.e. the highest **sum of next-token
    log-probabilities over the candidate's tokens**. When every candidate is one token this is the argmax of the
    next-token logits over the window's tokens (spec §A10.2's "logit argmax over window tokens"); when a tokenizer
    splits a candidate (``c2`` → ``c`` + ``2``), the first token alone would tie every candidate sharing it, so
    the full continuation is scored. Ties go to the candidate seen first in the window.

* an **OpenAI-compatible chat endpoint** (``POST {base}/chat/completions``, temperature 0, a few tokens), scored
  ``greedy`` only (no logits). Base URL and key come from environment variables, never from config files.

Batching: the candidates of an item are scored together, as one batch over copies of the prompt's key/value cache,
so each prompt (200–1200 tokens) passes through the model once. Prompts themselves go one at a time, unpadded: an
item's scores then never depend on which items share its batch (padding moves logits in the last bits and can flip
near-ties), which costs some throughput on an accelerator with a small model.

``transformers`` is imported only when a local model is loaded, so the rest of posym works without it.
"""

from __future__ import annotations

import argparse
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
from typing import Callable, Iterable

import numpy as np
import pandas as pd

from . import claims, probes
from .files import write_csv
from .tasks import TASKS

log = logging.getLogger("posym.llm")

METHODS = ("greedy", "restricted")
ITEM_COLUMNS = [
    "model",
    "task",
    "window",
    "run",
    "item",
    "answer",
    "greedy",
    "greedy_correct",
    "restricted",
    "restricted_correct",
]
SUMMARY_COLUMNS = ["model", "task", "window", "method", "accuracy", "sd", "runs", "items"]

#: Characters stripped from both ends of a reply's first word ("c2." → c2, "'y'" → y, "**o**" → o).
ANSWER_STRIP = "\"'`.,;:!?()[]{}<>*"
#: Characters of a prompt's end that candidates are tokenised after (:func:`continuations`).
CONTEXT_CHARS = 64
#: Candidate prefixes scored per forward pass: bounds the copies of the prompt's key/value cache held at once.
CANDIDATE_ROWS = 32

# Claim A-7 (spec §A12) and the paper's filter 1 (§A10.2).
FILTER_WINDOW, FILTER_ACCURACY = 16, 0.85
CLAIM_WINDOWS = (32, 100, 300)


class ProbeError(RuntimeError):
    """A probe cannot run as configured (no such model directory, no chat template, endpoint failures)."""


def parse_answer(text: str) -> str:
    """The first whitespace-separated word of a reply, with surrounding quotes and punctuation removed ("" if none)."""
    words = text.split()
    return words[0].strip(ANSWER_STRIP) if words else ""


def window_candidates(item: dict) -> list[str]:
    """The window's distinct tokens (the query excluded), in order of first appearance."""
    return list(dict.fromkeys(item["tokens"][:-1]))


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


def score_item(local: LocalModel, item: dict, max_new_tokens: int) -> tuple[str, str]:
    """(greedy answer, restricted answer) of one probe item: one forward pass over the prompt, then short
    continuations from copies of its key/value cache."""
    import torch

    text = local.prompt_text(item["prompt"])
    prompt_ids = local.prompt_ids(text)
    candidates = window_candidates(item)
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


# ----------------------------------------------------------------------------------------------- probes


Answerer = Callable[[dict], tuple[str, str | None]]


def local_answerer(local: LocalModel, max_new_tokens: int) -> Answerer:
    return lambda item: score_item(local, item, max_new_tokens)


def endpoint_answerer(client: EndpointClient) -> Answerer:
    return lambda item: (parse_answer(client.complete(item["prompt"])), None)


def run_probes(
    answer: Answerer, model: str, tasks: Iterable[str], windows: Iterable[int], runs: Iterable[int], n_items: int
) -> pd.DataFrame:
    """One row per item (columns :data:`ITEM_COLUMNS`); run ``r`` draws a fresh item set with seed ``r`` (§A10.2).

    ``restricted`` and ``restricted_correct`` are empty for an answerer without logits (an endpoint).
    """
    rows = []
    for task in tasks:
        for window in windows:
            for run in runs:
                block = []
                for k, item in enumerate(probes.probe_items(task, window, n_items, seed=run)):
                    greedy, restricted = answer(item)
                    block.append(
                        {
                            "model": model,
                            "task": task,
                            "window": window,
                            "run": run,
                            "item": k,
                            "answer": item["answer"],
                            "greedy": greedy,
                            "greedy_correct": greedy == item["answer"],
                            "restricted": restricted,
                            "restricted_correct": None if restricted is None else restricted == item["answer"],
                        }
                    )
                rows += block
                log.info(
                    "%s W=%d run %d: greedy %.2f", task, window, run, np.mean([r["greedy_correct"] for r in block])
                )
    return pd.DataFrame(rows, columns=ITEM_COLUMNS)


def read_items(path: str | os.PathLike) -> pd.DataFrame:
    """An items CSV with answers kept as strings ("1", "nan" stay text) and empty correctness as missing."""
    frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    for column in ("window", "run", "item"):
        frame[column] = frame[column].astype(int)
    for method in METHODS:
        frame[f"{method}_correct"] = frame[f"{method}_correct"].map({"True": True, "False": False, "": None})
    return frame


def run_accuracy(items: pd.DataFrame) -> pd.DataFrame:
    """Accuracy per model, task, window, run and method (methods without answers are left out)."""
    frames = []
    for method in METHODS:
        scored = items.dropna(subset=[f"{method}_correct"])
        if len(scored):
            grouped = scored.groupby(["model", "task", "window", "run"], sort=False)[f"{method}_correct"]
            frames.append(
                grouped.agg(accuracy=lambda s: s.astype(float).mean(), items="size").reset_index().assign(method=method)
            )
    if not frames:
        return pd.DataFrame(columns=["model", "task", "window", "run", "method", "accuracy", "items"])
    return pd.concat(frames, ignore_index=True)


def summarise(items: pd.DataFrame) -> pd.DataFrame:
    """Mean and sd (ddof 1) over runs of the per-run accuracy, per model, task, window and method (§A10.2)."""
    per_run = run_accuracy(items)
    keys = ["model", "task", "window", "method"]
    summary = per_run.groupby(keys, sort=False).agg(
        accuracy=("accuracy", "mean"), sd=("accuracy", "std"), runs=("run", "size"), items=("items", "first")
    )
    return summary.reset_index()[SUMMARY_COLUMNS]


# ---------------------------------------------------------------------------- Fig 5C/D, Table 3, claim A-7


def plot_llm_accuracy(published: pd.DataFrame, models: Iterable[str], ours: pd.DataFrame | None):
    """Fig 5C/D: accuracy against window size, one panel per task; the paper's models (dashed, ±1 sd bars) beside
    ours (solid, one line per model and method). Without ours, the figure says that no model was configured."""
    import matplotlib.pyplot as plt

    models = list(models)
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, task in zip(axes, TASKS):
        for model in models:
            rows = published[(published["model"] == model) & (published["task"] == task)]
            ax.errorbar(
                rows["window"],
                rows["accuracy"],
                yerr=rows["sd"].fillna(0),
                ls="--",
                marker="o",
                ms=3,
                capsize=2,
                label=f"{model} (paper)",
            )
        if ours is not None:
            for (model, method), rows in ours[ours["task"] == task].groupby(["model", "method"], sort=False):
                ax.errorbar(
                    rows["window"],
                    rows["accuracy"],
                    yerr=rows["sd"].fillna(0),
                    marker="s",
                    ms=3,
                    capsize=2,
                    label=f"{model}, {method} (ours)",
                )
        ax.set_xscale("log")
        ax.set_xticks(probes.PROBE_WINDOWS, [str(w) for w in probes.PROBE_WINDOWS], fontsize=7)
        ax.minorticks_off()
        ax.set_title(f"{task.capitalize()} task (1 hop)")
        ax.set_xlabel("target-window size")
        ax.set_ylim(-0.02, 1.02)
    axes[0].set_ylabel("accuracy")
    axes[1].legend(fontsize=7)
    if ours is None:
        fig.suptitle("paper values only: no model configured (config llm.model / llm.endpoint_model)", fontsize=9)
    fig.tight_layout()
    return fig


def table3(published: pd.DataFrame, ours: pd.DataFrame | None) -> pd.DataFrame:
    """Table 3: one row per window, one "mean (sd)" column per model and task, the paper's first, ours after."""
    frames = [published.assign(column=published["model"] + " " + published["task"] + " (paper)")]
    if ours is not None:
        frames.append(ours.assign(column=ours["model"] + ", " + ours["method"] + " " + ours["task"] + " (ours)"))
    long = pd.concat(frames, ignore_index=True)
    long["cell"] = [f"{a:.2f}" + ("" if np.isnan(s) else f" ({s:.2f})") for a, s in zip(long["accuracy"], long["sd"])]
    wide = long.pivot(index="window", columns="column", values="cell")
    return wide[list(dict.fromkeys(long["column"]))].sort_index().fillna("—").reset_index()


def claims_a7(items: pd.DataFrame | None) -> pd.DataFrame:
    """Claim A-7 (spec §A12), per scoring method: a local model that passes filter 1 of §A10.2 (Letter accuracy at
    W = 16 ≥ 0.85, mean over runs) must have Letter > Number at W = 32, 100 and 300, in every run (then "k of n
    seeds pass"). A model that fails the filter leaves the comparisons "not tested", their values still shown."""
    if items is None:
        return pd.DataFrame(
            [
                claims.row("A-7", check, "no model configured", expected, None, task=task)
                for task, check, expected in _claim_checks("")
            ],
            columns=claims.COLUMNS,
        )
    rows = []
    for method, frame in run_accuracy(items).groupby("method", sort=False):
        at = frame.set_index(["task", "window", "run"])["accuracy"]
        filter_values = frame[(frame["task"] == "letter") & (frame["window"] == FILTER_WINDOW)]["accuracy"]
        qualifies = bool(filter_values.mean() >= FILTER_ACCURACY) if len(filter_values) else None
        (task, check, expected), *comparisons = _claim_checks(f"{method}: ")
        measured = f"{filter_values.mean():.3f} over {len(filter_values)} runs" if len(filter_values) else "—"
        rows.append(claims.row("A-7", check, measured, expected, qualifies, task=task, seed="mean"))
        note = {True: "", False: " (the model fails the filter)", None: " (filter not measured)"}[qualifies]
        for (task, check, expected), window in zip(comparisons, CLAIM_WINDOWS):
            measured_runs = [
                r for r in sorted(frame["run"].unique()) if ("letter", window, r) in at and ("number", window, r) in at
            ]
            if not measured_runs:
                rows.append(claims.row("A-7", check, f"W = {window} not measured", expected, None, task=task))
            for run in measured_runs:
                letter, number = at[("letter", window, run)], at[("number", window, run)]
                measured = f"letter {letter:.3f}, number {number:.3f}{note}"
                rows.append(
                    claims.row(
                        "A-7", check, measured, expected, (letter > number) if qualifies else None, task=task, seed=run
                    )
                )
    return claims.with_seed_summary(rows)


def _claim_checks(prefix: str) -> list[tuple[str, str, str]]:
    """(task, check, expected) of claim A-7: the filter, then one comparison per window."""
    return [("letter", f"{prefix}filter: letter accuracy at W = {FILTER_WINDOW}", f"≥ {FILTER_ACCURACY}")] + [
        ("", f"{prefix}letter > number at W = {w}", "letter > number") for w in CLAIM_WINDOWS
    ]


# ------------------------------------------------------------------------------------------------- CLI


def cmd_llm_probe(args) -> None:
    if args.items < 1 or args.max_new_tokens < 1 or min(args.windows) < 1:
        raise SystemExit("--items, --max-new-tokens and every --windows value must be ≥ 1")
    try:
        if args.model is not None:
            local = load_local_model(args.model, args.device, args.dtype, args.chat_template, args.name)
            answer, name = local_answerer(local, args.max_new_tokens), local.name
        else:
            client = EndpointClient.from_environment(
                args.endpoint_model, args.url_env, args.key_env, max_tokens=args.max_new_tokens
            )
            answer, name = endpoint_answerer(client), args.name or args.endpoint_model
        items = run_probes(answer, name, args.tasks, args.windows, args.runs, args.items)
    except ProbeError as err:
        raise SystemExit(f"llm-probe: {err}") from None
    write_csv(args.out_items, items)
    write_csv(args.out_summary, summarise(items))
    log.info("%d items -> %s, summary -> %s", len(items), args.out_items, args.out_summary)


def add_cli(subparsers: argparse._SubParsersAction) -> None:
    s = subparsers.add_parser(
        "llm-probe", help="paper A's 1-hop LLM probes on a local model or an endpoint (spec §A10.2)"
    )
    source = s.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", type=Path, help="local Hugging Face causal-LM directory (never downloaded)")
    source.add_argument("--endpoint-model", help="model name at an OpenAI-compatible endpoint (greedy scoring only)")
    s.add_argument(
        "--url-env", default="POSYM_LLM_URL", help="environment variable holding the endpoint's base URL (…/v1)"
    )
    s.add_argument("--key-env", default="POSYM_LLM_KEY", help="environment variable holding the endpoint's API key")
    s.add_argument("--name", help="model label in the outputs (default: the directory name or the endpoint model)")
    s.add_argument("--tasks", nargs="+", choices=TASKS, default=list(TASKS))
    s.add_argument("--windows", type=int, nargs="+", default=list(probes.PROBE_WINDOWS), help="target-window sizes")
    s.add_argument(
        "--runs", type=int, nargs="+", default=list(probes.PROBE_RUNS), help="run i draws its items with seed i"
    )
    s.add_argument("--items", type=int, default=probes.PROBE_ITEMS, help="items per window and run")
    s.add_argument("--max-new-tokens", type=int, default=5, help="tokens generated for the greedy answer")
    s.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or auto")
    s.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"], default="auto")
    s.add_argument("--chat-template", choices=["auto", "on", "off"], default="auto")
    s.add_argument("--out-items", type=Path, required=True)
    s.add_argument("--out-summary", type=Path, required=True)
    s.add_argument("--threads", type=int)
    s.set_defaults(func=cmd_llm_probe)
