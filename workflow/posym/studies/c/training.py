"""Paper C's constrained training (spec §C6 "Constrained training", claim C-4): how fast the prev / induction
circuit forms on a per-sequence random map when the QK form is made symmetric or its RoPE phase is suppressed.

* **Task** (:func:`random_map_stream`): V tokens; x_0 uniform, x_{t+1} = f(x_t) with probability ``map_probability``
  (a *map step*), else uniform; f: V → V a uniformly random map drawn afresh for every sequence. The batch of
  optimizer step k of seed s is a pure function of (``data_seed``, s, k); the evaluation stream of (``eval_seed``).
  Both are made on the training device from a counter-based generator (SplitMix64 in int64 tensor arithmetic),
  the same tokens on every device, with no per-step numpy and no copy from the host.
* **Model**: the attention-only transformer of :mod:`posym.studies.c.architecture` (APE or rotate-half RoPE).
* **Penalties** (:func:`penalties`: :func:`head_sym_shares`, :func:`head_imag_shares`), differentiable in W_Q, W_K, each a mean over every
  head of every layer, with the denominator detached (its value the share, its gradient the numerator's):
  sym = ‖M_A‖²/‖M‖² (= dir_frac² of :func:`posym.studies.c.qk_fingerprint.head_fingerprint`), imag =
  Σ_t‖Im M_t‖² / Σ_t(‖Re M_t‖² + ‖Im M_t‖²) over the rotate-half pairs (from
  :func:`posym.studies.c.qk_fingerprint.pair_norms`). Loss = CE + λ·penalty.
* **Metric**: ce_pred = CE on map steps whose current token appeared earlier in the sequence (the steps an
  induction circuit can predict); formation step = the first evaluation with ce_pred < ½(ln V + floor).
* **Early stop**: the learning rate is constant after warmup, so what a run does up to a step does not depend on
  when it stops. Each member stops ``stop_after_formation`` steps after its formation (or at ``max_steps``) and
  leaves the pack; the others train on. A member's curve, formation and final model are therefore the same
  packed or alone (tested), and as in a run of ``max_steps`` up to its stop.
* **Checkpoints** are the core's (:mod:`posym.training.checkpoints`: safetensors, checksums, atomic directories), one
  folder per member; every ``checkpoint_every`` steps they carry the optimizer moments, so a killed job resumes
  from the newest one and ends as an uninterrupted job does (the data need no state: a function of the step).
  A member's last checkpoint (its stop) is marked ``final`` in its progress.json.
* **Longer runs go on from shorter ones**: for the same reason, the checkpoints' fingerprint leaves out how far a
  run trains (:data:`HORIZON_SETTINGS`), so a rerun with more ``max_steps`` (or without the early stop) resumes
  from the last checkpoint of the shorter run instead of starting over, and ends as a run of that length from the
  start does (tested). A shorter rerun cannot use a longer run's checkpoints (the optimizer moments of the steps
  before its stop are gone) and trains afresh.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from posym.nn.precision import autocast
from posym.pipeline import variants
from posym.studies.c import qk_fingerprint as qk
from posym.training import checkpoints as ckpt
from posym.training.trainer import Trainer

from .architecture import AttentionOnly, model_config
from .variants import arm_overrides

log = logging.getLogger("posym.c.training")

PENALTIES = ("none", "sym", "imag")
#: Settings of how to compute, not what: they leave a run's fingerprint (and so its checkpoints) alone.
HOW_SETTINGS = ("device", "deterministic", "checkpoint_every", "compile")
#: How far a member trains: left out of the fingerprint too, as a run is the start of every longer one (constant
#: learning rate after warmup, the data a function of the step).
HORIZON_SETTINGS = ("max_steps", "stop_after_formation")


# --------------------------------------------------------------------------------------------------- task


def random_map_batch(n: int, length: int, vocab: int, map_probability: float, seed_words: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
    """``n`` sequences of the random-map task: tokens (n, length) int64 and ``predictable`` (n, length − 1), true
    where step t → t+1 is a map step and x_t appeared among x_0 … x_{t−1} (ce_pred's positions)."""
    drawn = random_map_draw(n, length, vocab, map_probability, seed_words)
    return drawn["tokens"], drawn["mapped"] & drawn["appeared"]


def random_map_draw(n: int, length: int, vocab: int, map_probability: float, seed_words: Sequence[int]) -> dict[str, np.ndarray]:
    """:func:`random_map_batch` with what it was drawn from: ``maps`` (n, V), each sequence's f; ``mapped``
    (n, length − 1), which steps applied it; ``appeared``, whether x_t occurred before t. A function of
    ``seed_words`` alone (:func:`random_map_stream`, on the CPU: the same on every device)."""
    drawn = random_map_stream(n, length, vocab, map_probability, stream_keys([seed_words], torch.device("cpu")), details=True)
    return {name: value[0].numpy() for name, value in drawn.items()}


# The stream is made on the device it trains on, with no per-step numpy and no host synchronisation: its random
# words come from a counter-based generator (SplitMix64: the n-th word of a stream is a fixed mix of key + n·γ,
# in int64 arithmetic that wraps alike on every device), and its tokens from the drawn maps in O(log length)
# vectorised steps instead of a loop over positions.
#: The training stream's generator, in the checkpoints' fingerprint: checkpoints of another stream (numpy's PCG64
#: before) are trained over, not resumed.
STREAM = "splitmix64"
_GAMMA = -0x61C8864680B583EB  # 0x9E3779B97F4A7C15, SplitMix64's increment, as a signed 64-bit integer
_MIX = (-0x40A7B892E31B1A47, -0x6B2FB644ECCEEE15)  # 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _wrap(value: int) -> int:
    """A Python integer as the signed 64-bit integer with the same low 64 bits."""
    return (value + 2**63) % 2**64 - 2**63


def _shift(z: torch.Tensor, bits: int) -> torch.Tensor:
    """The logical right shift of int64 ``z`` (torch's >> keeps the sign)."""
    return (z >> bits) & ((1 << (64 - bits)) - 1)


def _mix(z: torch.Tensor) -> torch.Tensor:
    """SplitMix64's output function, on int64 tensors."""
    z = (z ^ _shift(z, 30)) * _MIX[0]
    z = (z ^ _shift(z, 27)) * _MIX[1]
    return z ^ _shift(z, 31)


def stream_keys(words: Sequence[Sequence[int | torch.Tensor]], device: torch.device) -> torch.Tensor:
    """One stream key per row of ``words`` (each a sequence of integers; a word may also be an int64 tensor of one
    value per row), (rows,) int64 on ``device``: the seed words mixed in one by one. Made on the device from the
    Python integers as kernel arguments: nothing is copied from the host."""
    rows = len(words)
    if rows != 1 and any(isinstance(w, torch.Tensor) for w in words[0]):
        raise ValueError("tensor words give one key per row of a single sequence of words")
    keys = []
    for sequence in words:
        key = torch.full((1,), _wrap(0x5EED), dtype=torch.int64, device=device)
        for word in sequence:
            step = (word.to(device=device, dtype=torch.int64) + 1) * _GAMMA if isinstance(word, torch.Tensor) else _wrap((int(word) + 1) * _GAMMA)
            key = _mix(key + step)
        keys.append(key)
    return torch.cat(keys) if rows > 1 else keys[0]


def random_map_stream(
    n: int, length: int, vocab: int, map_probability: float, keys: torch.Tensor, details: bool = False
) -> dict[str, torch.Tensor]:
    """``n`` sequences of the random-map task for each stream key (``keys`` (S,), :func:`stream_keys`), on the keys'
    device: ``tokens`` (S, n, length) int64; with ``details`` also ``maps`` (S, n, V), ``mapped`` and
    ``appeared`` (S, n, length − 1).

    Each sequence reads 1 + V + 2(length − 1) uniform 32-bit values of its key's stream (two per 64-bit word): x_0,
    its map f, whether each step maps and each step's uniform token (a token is ⌊u·V/2³²⌋, a map step u < p·2³²). Then x_t = f^(t − s)(r_s), s the last position ≤ t where the chain restarted
    (0, or a uniform step before it) and r_s the token drawn there: f's powers f^(2^j) by repeated composition,
    applied by the bits of t − s, the same tokens as the loop x_{t+1} = f(x_t) or uniform."""
    S, T, V = len(keys), length, vocab
    values = 1 + V + 2 * (T - 1)  # 32-bit uniforms per sequence, two per 64-bit word
    words = (values + 1) // 2
    counters = torch.arange(1, n * words + 1, device=keys.device, dtype=torch.int64).view(1, n, words)
    z = _mix(keys.view(S, 1, 1) + counters * _GAMMA)
    u = torch.stack([z & 0xFFFFFFFF, _shift(z, 32)], dim=-1).view(S, n, 2 * words)[..., :values]
    first, maps, chance, noise = u.split([1, V, T - 1, T - 1], dim=-1)
    mapped = chance < round(map_probability * 2**32)
    starts = (torch.cat([first, noise], dim=-1) * V) >> 32  # the token a restart at t draws (x_0 at 0)
    maps = (maps * V) >> 32
    positions = torch.arange(T, device=keys.device)
    restart = torch.cat([torch.ones_like(mapped[..., :1]), ~mapped], dim=-1)
    last = torch.where(restart, positions, 0).cummax(dim=-1).values
    distance = positions - last
    tokens = starts.gather(-1, last)
    power = maps  # f^(2^j)
    for j in range(max(1, (T - 1).bit_length())):
        tokens = torch.where((distance >> j) & 1 == 1, power.gather(-1, tokens), tokens)
        power = power.gather(-1, power)
    out = {"tokens": tokens}
    if details:
        first_seen = torch.full((S, n, V), T, device=keys.device, dtype=torch.int64)
        first_seen = first_seen.scatter_reduce(-1, tokens, positions.expand_as(tokens), "amin")
        out.update(maps=maps, mapped=mapped, appeared=first_seen.gather(-1, tokens[..., :-1]) < positions[:-1])
    return out


def formation_threshold(vocab: int, floor: float) -> float:
    """½(ln V + floor): halfway from chance to the task's floor (paper: ln 64, 0.15 → 2.154)."""
    return 0.5 * (math.log(vocab) + floor)


def formation_step(curve: pd.DataFrame, threshold: float) -> float:
    """The first evaluated step whose ce_pred is below ``threshold``; NaN when none is."""
    below = curve[curve["ce_pred"] < threshold]
    return float(below["step"].min()) if len(below) else float("nan")


# ------------------------------------------------------------------------------------------------ penalties


def pair_columns(W: torch.Tensor, rotary_dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotate-half pair columns of W (..., d, d_head): dims t and t + r/2 of the first r."""
    half = rotary_dim // 2
    return W[..., :half], W[..., half:rotary_dim]


def head_sym_shares(W_Q: torch.Tensor, W_K: torch.Tensor, detach_denominator: bool = True) -> torch.Tensor:
    """‖M_A‖²/‖M‖² of every head (W_Q, W_K (..., d, d_head); M = W_Q W_Kᵀ), through d_head × d_head Gram matrices:
    ‖M‖² = ⟨W_QᵀW_Q, W_KᵀW_K⟩, tr(M²) = ⟨A, Aᵀ⟩ with A = W_KᵀW_Q, ‖M_A‖² = (‖M‖² − tr M²)/2."""
    gram_q, gram_k = W_Q.transpose(-1, -2) @ W_Q, W_K.transpose(-1, -2) @ W_K
    cross = W_K.transpose(-1, -2) @ W_Q
    total = (gram_q * gram_k).sum((-1, -2))
    antisymmetric = 0.5 * (total - (cross * cross.transpose(-1, -2)).sum((-1, -2)))
    return antisymmetric / (total.detach() if detach_denominator else total)


def head_imag_shares(W_Q: torch.Tensor, W_K: torch.Tensor, rotary_dim: int, detach_denominator: bool = True) -> torch.Tensor:
    """Σ_t‖Im M_t‖² / Σ_t(‖Re M_t‖² + ‖Im M_t‖²) of every head over the rotate-half pairs: with w_q = a + ic and
    w_k = b + id, ‖Im M_t‖² = |c|²|b|² + |a|²|d|² − 2(a·c)(b·d) and ‖Re‖² + ‖Im‖² = (|a|² + |c|²)(|b|² + |d|²)."""
    a, c = pair_columns(W_Q, rotary_dim)
    b, d = pair_columns(W_K, rotary_dim)
    aa, bb, cc, dd = ((x * x).sum(-2) for x in (a, b, c, d))
    cross = (a * c).sum(-2) * (b * d).sum(-2)
    imaginary = (cc * bb + aa * dd - 2 * cross).sum(-1)
    total = ((aa + cc) * (bb + dd)).sum(-1)
    return imaginary / (total.detach() if detach_denominator else total)


def random_imag_fracs(training: Mapping, arm: str, heads: int, seed: int) -> np.ndarray:
    """rope_imag_frac of ``heads`` random heads of ``arm``'s shape (W_Q, W_K standard normal: the share is scale-free):
    the null a trained head's is compared with."""
    config = model_config(training["task"]["vocab_size"], arm_model_settings(training, arm))
    generator = torch.Generator().manual_seed(seed)
    W_Q, W_K = (torch.randn(heads, config.d_model, config.head_dim, generator=generator, dtype=torch.float64) for _ in "QK")
    return head_imag_shares(W_Q, W_K, config.rotary).numpy()


def penalties(model: AttentionOnly) -> dict[str, torch.Tensor]:
    """Each member's sym and imag penalty (S,): the mean share over every head of every layer."""
    W_Q, W_K = model.qk_weights()
    return {
        "sym": head_sym_shares(W_Q, W_K).mean((1, 2)),
        "imag": head_imag_shares(W_Q, W_K, model.config.rotary).mean((1, 2)),
    }


# -------------------------------------------------------------------------------------------------- settings


def arm_model_settings(training: Mapping, arm: str) -> dict:
    """The model settings of an arm (its variant of ``training``: posym.studies.c.variants), at the task's
    sequence length."""
    model = variants.resolve(training, arm_overrides(training["arms"][arm]))["model"]
    return {**model, "max_len": training["task"]["length"]}


def arm_fingerprint(training: Mapping, arm: str, seed: int) -> str:
    """What a checkpoint must match to be resumed or reused: the arm, the task, the model, the optimisation, seed;
    not how far the run trains (:data:`HORIZON_SETTINGS`), except a ``max_steps`` off the evaluation grid, where
    the run evaluates at its end and a longer run would not."""
    train = {k: v for k, v in training["train"].items() if k not in HOW_SETTINGS + HORIZON_SETTINGS}
    if training["train"]["max_steps"] % training["train"]["eval_every"]:
        train["max_steps"] = training["train"]["max_steps"]
    relevant = {
        "arm": training["arms"][arm], "task": training["task"], "model": arm_model_settings(training, arm),
        "train": train, "formation": training["formation"], "seed": seed, "stream": STREAM,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(relevant, sort_keys=True).encode()).hexdigest()


def learning_rate(step: int, train: Mapping) -> float:
    """Linear warmup over ``warmup_steps`` (the first update at lr/warmup), then constant."""
    return train["learning_rate"] * min(1.0, (step + 1) / max(1, train["warmup_steps"]))


# ------------------------------------------------------------------------------------------------- objective


class ArmObjective:
    """The seeds of one arm, trained packed by :class:`posym.training.trainer.Trainer`, each until its stop step:
    CE over every position plus λ × the arm's penalty; ce, ce_pred and both penalties every ``eval_every`` steps."""

    def __init__(self, training: Mapping, arm: str, seeds: Sequence[int], outs: Sequence[Path]):
        if len(seeds) != len(outs) or not seeds:
            raise ValueError("one output folder per seed")
        self.training, self.arm, self.spec = training, arm, training["arms"][arm]
        if self.spec["penalty"] not in PENALTIES:
            raise ValueError(f"arm {arm}: penalty {self.spec['penalty']!r} is not one of {PENALTIES}")
        self.task, self.settings = training["task"], training["train"]
        self.seeds, self.outs = [int(s) for s in seeds], [Path(o) for o in outs]
        self.steps, self.eval_every = self.settings["max_steps"], self.settings["eval_every"]
        self.model_config = model_config(self.task["vocab_size"], arm_model_settings(training, arm))
        self.threshold = formation_threshold(self.task["vocab_size"], training["formation"]["floor"])
        self.vocab = [f"t{i}" for i in range(self.task["vocab_size"])]

    def prepare(self, device: torch.device, precision: str) -> None:
        self.device, self.precision = device, precision
        drawn = random_map_stream(
            self.training["eval"]["sequences"], self.task["length"], self.task["vocab_size"], self.task["map_probability"],
            stream_keys([[self.training["eval"]["seed"]]], device), details=True,
        )  # fmt: skip
        self.eval_tokens, self.eval_mask = drawn["tokens"][0], drawn["mapped"][0] & drawn["appeared"][0]
        self.member_seeds = torch.tensor(self.seeds, dtype=torch.int64, device=device)  # the stream's words, on the device
        self._member_seeds: dict[tuple[int, ...], torch.Tensor] = {tuple(range(len(self.seeds))): self.member_seeds}

    def fingerprint(self, m: int) -> str:
        return arm_fingerprint(self.training, self.arm, self.seeds[m])

    def batch(self, step: int, members: Sequence[int]) -> torch.Tensor:
        """The members' batches of ``step``, (members, batch, length), made on the device: member m's is the stream
        of (data_seed, seed m, step)."""
        rows = tuple(members)
        if rows not in self._member_seeds:  # once per pack: indexing by a list copies it to the device
            self._member_seeds[rows] = self.member_seeds[list(rows)]
        keys = stream_keys([[self.training["data_seed"], self._member_seeds[rows], step]], self.device)
        return random_map_stream(self.settings["batch_size"], self.task["length"], self.task["vocab_size"], self.task["map_probability"], keys)["tokens"]

    def loss(self, model: AttentionOnly, ids: torch.Tensor, dropout) -> tuple[torch.Tensor, torch.Tensor]:
        with autocast(self.device, self.precision):
            logits = model(ids[..., :-1])
        members = ids.shape[0]
        losses = F.cross_entropy(logits.float().flatten(0, 2), ids[..., 1:].flatten(), reduction="none").view(members, -1).mean(1)
        if self.spec["penalty"] == "none":
            return losses, losses
        return losses, losses + self.spec["lambda"] * penalties(model)[self.spec["penalty"]]

    def learning_rate(self, step: int) -> float:
        return learning_rate(step, self.settings)

    def evaluate(self, model: AttentionOnly, step: int, members: Sequence[int]) -> list[list[dict]]:
        """ce, ce_pred and both penalties of every member on the evaluation stream, a row each."""
        S = len(members)
        ids = self.eval_tokens.expand(S, *self.eval_tokens.shape)
        chunk = self.training["eval"]["batch_size"]
        losses = []
        for start in range(0, ids.shape[1], chunk):
            part = ids[:, start : start + chunk]
            with autocast(self.device, self.precision):
                logits = model(part[..., :-1])
            losses.append(F.cross_entropy(logits.float().flatten(0, 2), part[..., 1:].flatten(), reduction="none").view(S, *part[..., 1:].shape[1:]))
        each = torch.cat(losses, dim=1)  # (S, N, T-1)
        mask = self.eval_mask.to(each.dtype)
        ce = each.mean((1, 2))
        ce_pred = (each * mask).sum((1, 2)) / mask.sum()
        shares = penalties(model)
        rows = [
            [{"step": step, "ce": float(ce[i]), "ce_pred": float(ce_pred[i]), "sym": float(shares["sym"][i]), "imag": float(shares["imag"][i])}]
            for i in range(S)
        ]
        for m, (row,) in zip(members, rows):
            if row["ce_pred"] < self.threshold:
                log.info("arm %s seed %d: ce_pred %.3f at step %d, below %.3f", self.arm, self.seeds[m], row["ce_pred"], step, self.threshold)
        return rows

    def formation(self, history: Sequence[dict]) -> float:
        """The first evaluated step whose ce_pred is below the threshold; NaN when none is."""
        return next((float(row["step"]) for row in history if row["ce_pred"] < self.threshold), float("nan"))

    def stop_step(self, m: int, history: Sequence[dict]) -> int:
        """``stop_after_formation`` steps after the formation, or ``max_steps``."""
        formed, margin = self.formation(history), self.settings["stop_after_formation"]
        if margin is None or math.isnan(formed):
            return self.steps
        return min(self.steps, int(formed) + margin)

    def progress(self, m: int, step: int, final: bool, history: Sequence[dict]) -> dict:
        formed = self.formation(history)
        return {"final": final, "fingerprint": self.fingerprint(m), "formation_step": None if math.isnan(formed) else formed}


def train_arm(training: Mapping, arm: str, seeds: Sequence[int], outs: Sequence[Path]) -> None:
    """Train the seeds of ``arm`` (resuming where their checkpoints allow)."""
    Trainer(ArmObjective(training, arm, seeds, outs)).train()


# --------------------------------------------------------------------------------------------------- outputs


def member_outputs(training: Mapping, arm: str, seed: int, out: Path, device: str = "cpu") -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """One trained member's row (formation, stop, final values), curve and per-head features, from its checkpoints."""
    found = ckpt.list_checkpoints(Path(out) / "checkpoints")
    if not found:
        raise RuntimeError(f"{out}: no checkpoints")
    final = ckpt.load_progress(found[-1][1])
    if not final.get("final") or final.get("fingerprint") != arm_fingerprint(training, arm, seed):
        raise RuntimeError(f"{out}: training is not complete, or its checkpoints were made with other settings")
    progress = [ckpt.load_progress(d) for _, d in found]
    curve = pd.DataFrame([r for p in progress for r in p["eval"]])[["step", "ce", "ce_pred", "sym", "imag"]]
    curve.insert(0, "seed", seed)
    curve.insert(0, "arm", arm)
    threshold = formation_threshold(training["task"]["vocab_size"], training["formation"]["floor"])
    formation = formation_step(curve, threshold)
    last = curve.iloc[-1]
    model, _ = ckpt.load_model(found[-1][1], device)
    heads = head_features(model, training)
    heads.insert(0, "seed", seed)
    heads.insert(0, "arm", arm)
    prev = heads.loc[heads["is_prev"]].iloc[0]
    row = {
        "arm": arm, "seed": seed, "position": training["arms"][arm]["position"], "penalty": training["arms"][arm]["penalty"],
        "lambda": training["arms"][arm]["lambda"], "formation_step": formation, "formed": not math.isnan(formation),
        "stop_step": int(found[-1][0]), "final_ce": float(last["ce"]), "final_ce_pred": float(last["ce_pred"]),
        "final_sym": float(last["sym"]), "final_imag": float(last["imag"]), "prev_layer": int(prev["layer"]),
        "prev_head": int(prev["head"]), "prev_score": float(prev["prev"]), "prev_dir_frac": float(prev["dir_frac"]),
        "prev_rope_imag_frac": float(prev["rope_imag_frac"]), "train_seconds": float(sum(p["wall_seconds"] for p in progress)),
    }  # fmt: skip
    return row, curve, heads


#: The first query position the prev score reads (the authors' evaluate() skips the first 64, "warmup positions").
PREV_FROM = 64


@torch.no_grad()
def head_features(model: AttentionOnly, training: Mapping) -> pd.DataFrame:
    """Every head's prev score and its fingerprint, as the authors' ``evaluate`` and ``weight_metrics``
    (p10_training_intervention.py) read them: prev = the mean attention on the previous token of the queries at
    positions ≥ :data:`PREV_FROM` (half the sequence when it is shorter) over the evaluation stream; dir_frac,
    D_head and the RoPE features (posym.studies.c.qk_fingerprint, float64) of the head's own W_Q W_Kᵀ, the matrix the
    penalties constrain (no LayerNorm folded in: the toy model's gains are its own parameters), rotate-half
    pairs (for an APE model a placebo pairing of the same dims, spec §C4). ``is_prev`` marks the head with the
    highest prev score."""
    task, config = training["task"], model.config
    tokens, _ = random_map_batch(training["eval"]["sequences"], task["length"], task["vocab_size"], task["map_probability"], [training["eval"]["seed"]])
    ids = torch.as_tensor(tokens, device=model.wte.device)
    queries = torch.arange(min(PREV_FROM, ids.shape[1] // 2), ids.shape[1], device=ids.device)
    names = [f"blocks.{layer}.attn.hook_pattern" for layer in range(config.n_layer)]
    prev = torch.zeros(config.n_layer, config.n_head, dtype=torch.float64)
    chunk = training["eval"]["batch_size"]
    for start in range(0, len(ids), chunk):
        cache = model.run_with_cache(ids[start : start + chunk], names)
        for layer, name in enumerate(names):
            pattern = cache[name][0]  # (B, H, T, T)
            prev[layer] += pattern[:, :, queries, queries - 1].sum((0, 2)).double().cpu()
    prev /= len(ids) * len(queries)
    W_Q, W_K = (w[0].detach().double().cpu().numpy() for w in model.qk_weights())  # (L, H, d, dh)
    rows = []
    for layer in range(config.n_layer):
        for head in range(config.n_head):
            q, k = W_Q[layer, head], W_K[layer, head]
            metrics = qk.head_fingerprint(q, k)
            rope = qk.rope_features(q, k, config.rotary, "rotate_half", config.rope_base)
            rows.append({"layer": layer, "head": head, "prev": float(prev[layer, head]), "dir_frac": metrics["dir_frac"], "D_head": metrics["D_head"], **rope})
    frame = pd.DataFrame(rows)
    frame["is_prev"] = frame.index == frame["prev"].idxmax()
    return frame


def arm_outputs(training: Mapping, arm: str, seeds: Sequence[int], outs: Sequence[Path]) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The arm's runs, curves and heads tables, its seeds in order."""
    parts = [member_outputs(training, arm, s, o) for s, o in zip(seeds, outs)]
    return pd.DataFrame([p[0] for p in parts]), pd.concat([p[1] for p in parts], ignore_index=True), pd.concat([p[2] for p in parts], ignore_index=True)
