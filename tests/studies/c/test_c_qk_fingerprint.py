"""The QK spectral fingerprint (posym.studies.c.qk_fingerprint, paper C §C2/§C4): the low-rank path against dense linear
algebra, the gauge invariance, the random-orientation null's published values, and the RoPE pair operators
against brute force and against the score identity, for both pairings."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posym.studies.c import qk_fingerprint as qk
from posym.nn.positions import Rope


def head(d=96, k=16, seed=0, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((d, k)) / np.sqrt(d)).astype(dtype), (rng.standard_normal((d, k)) / np.sqrt(d)).astype(dtype)


@pytest.mark.parametrize("d", [96, 24])  # a narrow head (the rank-k core) and a wide one (solved on M itself)
def test_the_fingerprint_equals_dense_linear_algebra(d):
    W_Q, W_K = head(d=d)
    centre = qk.centring(len(W_Q))
    for c in (None, centre):
        M = (W_Q @ W_K.T) if c is None else c @ W_Q @ W_K.T @ c
        low = qk.LowRank.of(W_Q, W_K, c)
        assert len(low.S) == 16 and np.allclose(low.matrix(), M, atol=1e-12)
        assert qk.head_fingerprint(W_Q, W_K, c)["rank"] == 16
        row = qk.head_fingerprint(W_Q, W_K, c)
        anti, sym = (M - M.T) / 2, (M + M.T) / 2
        assert row["dir_frac"] == pytest.approx(np.linalg.norm(anti) / np.linalg.norm(M), abs=1e-12)
        dense = np.linalg.eigvals(M)
        dense = dense[np.abs(dense) > 1e-9 * np.abs(dense).max()]
        assert sorted(np.abs(np.linalg.eigvals(low.core()))) == pytest.approx(sorted(np.abs(dense)), abs=1e-10)
        assert row["D_head"] == pytest.approx(np.abs(dense.imag).sum() / np.abs(dense).sum(), abs=1e-10)
        assert row["henrici"] == pytest.approx(np.sqrt(np.linalg.norm(M) ** 2 - np.sum(np.abs(dense) ** 2)) / np.linalg.norm(M), abs=1e-8)
        s = np.linalg.eigvalsh(sym)
        s = s[np.abs(s) > 1e-9 * np.abs(s).max()]
        assert row["content_pos_frac"] == pytest.approx(s[s > 0].sum() / np.abs(s).sum(), abs=1e-10)
        W_E = np.random.default_rng(1).standard_normal((50, len(W_Q)))
        scores = W_E @ M @ W_E.T
        off = scores[~np.eye(50, dtype=bool)]
        expected = (np.diag(scores).mean() - off.mean()) / np.sqrt(np.mean(scores**2))
        assert qk.self_match(low, W_E) == pytest.approx(expected, abs=1e-10)
        assert qk.self_match(low, qk.EmbeddingMoments.of(W_E, rows=7)) == pytest.approx(expected, abs=1e-10)  # in chunks


def test_symmetric_and_rotation_heads_sit_at_the_ends_of_the_scales():
    W_Q, _ = head()
    symmetric = qk.head_fingerprint(W_Q, W_Q)  # M = W Wᵀ: symmetric, positive semidefinite
    assert symmetric["dir_frac"] < 1e-7 and symmetric["D_head"] < 1e-7 and symmetric["content_pos_frac"] == pytest.approx(1)
    J = np.kron(np.eye(8), np.array([[0.0, 1.0], [-1.0, 0.0]]))  # W_K = W_Q J: M = W Jᵀ Wᵀ is antisymmetric
    rotation = qk.head_fingerprint(W_Q, W_Q @ J)
    assert rotation["dir_frac"] == pytest.approx(1, abs=1e-9) and rotation["D_head"] == pytest.approx(1, abs=1e-9)


def test_a_change_of_gauge_leaves_the_fingerprint_alone():
    """W_Q → W_Q G, W_K → W_K G^(−T) keeps M (spec §C1: D_head moves by ~1e-14)."""
    W_Q, W_K = head()
    G = np.random.default_rng(5).standard_normal((16, 16)) + 4 * np.eye(16)
    before = qk.head_fingerprint(W_Q, W_K)
    after = qk.head_fingerprint(W_Q @ G, W_K @ np.linalg.inv(G).T)
    for name in ("dir_frac", "D_head", "imag_mass", "henrici", "content_pos_frac"):
        assert abs(before[name] - after[name]) < 1e-10, name


def test_the_null_gives_the_published_values_at_gpt2_size():
    """dir_frac 0.707 and D_head 0.61 for a random orientation at d 768, k 64 (spec §C2: 0.707, 0.608)."""
    W_Q, W_K = head(d=768, k=64, seed=3)
    S = qk.LowRank.of(W_Q, W_K).S
    null = qk.null_distribution(S, 768, draws=300, seed=qk.null_seed(layer=2, head=5))
    assert null["dir_frac"].mean() == pytest.approx(0.707, abs=0.01)
    assert null["D_head"].mean() == pytest.approx(0.61, abs=0.02)
    again = qk.null_distribution(S, 768, draws=300, seed=qk.null_seed(layer=2, head=5))
    assert np.array_equal(null["D_head"], again["D_head"])  # seeded per head
    row = qk.with_null(W_Q, W_K, seed=7, draws=100)
    assert row["dir_frac_z"] == pytest.approx((row["dir_frac"] - row["dir_frac_null_mean"]) / row["dir_frac_null_sd"])
    # centred frames stay in the centred subspace
    frames = qk.random_frames(32, 4, 3, np.random.default_rng(0), qk.centring(32))
    assert np.allclose(frames.sum(axis=1), 0, atol=1e-12)


def test_the_fast_orientations_are_distributed_as_two_whole_frames():
    """The Bartlett draw of Q_2ᵀQ_1 against two QR'd Gaussian frames: the same moments, within Monte Carlo error."""
    d, k, draws = 40, 6, 4000
    fast = qk.random_orientations(d, k, draws, np.random.default_rng(1))
    frames = qk.random_frames(d, k, 2 * draws, np.random.default_rng(2))
    whole = np.swapaxes(frames[1::2], -1, -2) @ frames[0::2]
    for name, statistic in {"entry variance": lambda b: (b**2).mean(), "trace": lambda b: np.trace(b, axis1=1, axis2=2).mean(),
                            "top singular value": lambda b: np.linalg.svd(b, compute_uv=False)[:, 0].mean()}.items():
        assert statistic(fast) == pytest.approx(statistic(whole), abs=0.01), name
    assert (fast**2).mean() == pytest.approx(1 / d, rel=0.05)  # an entry of a Haar frame has variance 1/d
    S = np.linspace(1, 2, k)
    means = [qk.spectral_metrics(S[:, None] * b, float(np.sum(S**2)))["D_head"].mean() for b in (fast, whole)]
    assert means[0] == pytest.approx(means[1], abs=0.01)


@pytest.mark.parametrize("pairing", qk.PAIRINGS)
def test_closed_form_pair_norms_equal_brute_force(pairing):
    W_Q, W_K = head(d=48, k=16)
    real, imaginary = qk.pair_norms(W_Q, W_K, 16, pairing)
    operators = qk.pair_operators(W_Q, W_K, 16, pairing)
    assert np.allclose(real, np.linalg.norm(operators.real, axis=(1, 2)), atol=1e-12)
    assert np.allclose(imaginary, np.linalg.norm(operators.imag, axis=(1, 2)), atol=1e-12)
    # the rotary part of M is Σ_t Re(M_t): here every dim is rotary
    assert np.allclose(operators.real.sum(0), W_Q @ W_K.T, atol=1e-12)
    features = qk.rope_features(W_Q, W_K, 16, pairing)
    assert 0 < features["rope_imag_frac"] < 1 and 0 < features["hi_freq_dir"] < 1
    theta = qk.frequencies(16)
    assert theta.min() < features["freq_centroid"] < theta.max()


@pytest.mark.parametrize("pairing", qk.PAIRINGS)
def test_the_score_asymmetry_is_the_imaginary_pair_operators(pairing):
    """score(Δ) − score(−Δ) = Σ_t 2 sin(Δθ_t) nᵀ Im(M_t) n (Δ = key − query), in float32 to 1e-6 of the scores'
    size (float32 rounds a score of ~3 at ~2e-7; the order BLAS sums in moves the last digits)."""
    W_Q, W_K = head(d=64, k=32, seed=2, dtype=np.float32)
    n = np.random.default_rng(4).standard_normal(64).astype(np.float32)
    q, k = n @ W_Q, n @ W_K
    imaginary = qk.pair_operators(W_Q.astype(np.float64), W_K.astype(np.float64), 32, pairing).imag
    theta = qk.frequencies(32)
    i = 40
    for delta in (1, 3, 17):
        rotated_q = qk.rotate(np.stack([q, q]), np.array([i, i]), 32, pairing)
        rotated_k = qk.rotate(np.stack([k, k]), np.array([i + delta, i - delta]), 32, pairing)
        forward, backward = rotated_q @ rotated_k.T
        asymmetry = forward[0] - backward[1]
        expected = np.sum(2 * np.sin(delta * theta) * np.einsum("i,tij,j->t", n, imaginary, n))
        assert abs(asymmetry - expected) < 1e-6 * max(abs(forward[0]), abs(backward[1])), delta
        assert abs(expected) > 1e-3  # the asymmetry is there to be matched


def test_the_interleaved_rotation_is_the_models_rope():
    """posym's (GPT-J's) RoPE is the interleaved pairing turned counter-clockwise: the identity above holds for
    the model's own queries and keys."""
    x = np.random.default_rng(0).standard_normal((5, 32)).astype(np.float32)
    positions = np.arange(3, 8)
    ours = Rope(head_dim=32, rotary_dim=32).rotate(torch.from_numpy(x), torch.from_numpy(positions)).numpy()
    assert np.allclose(qk.rotate(x, positions, 32, "interleaved"), ours, atol=1e-5)
    with pytest.raises(ValueError, match="pairing"):
        qk.pair_dims(8, "adjacent")


@pytest.mark.parametrize("pairing", qk.PAIRINGS)
def test_the_relative_kernel_is_the_rotated_score(pairing):
    """even(Δ) + odd(Δ) is the score of n against itself Δ positions later (and earlier), with 16 of 24 dims
    rotating; odd is what the Im(M_t) ablation removes."""
    W_Q, W_K = head(d=40, k=24, seed=5)
    n = np.random.default_rng(6).standard_normal(40)
    deltas = np.array([-9, -2, -1, 1, 2, 9])
    query = 20
    q = qk.rotate((n @ W_Q)[None], np.array([query]), 16, pairing)[0]
    k = qk.rotate(np.repeat((n @ W_K)[None], len(deltas), 0), query + deltas, 16, pairing)
    even, odd = qk.relative_kernel(n, W_Q, W_K, deltas, 16, pairing)
    assert np.allclose(k @ q, even + odd, atol=1e-12)
    assert np.allclose(even, even[::-1]) and np.allclose(odd, -odd[::-1]) and np.abs(odd).max() > 1e-3
