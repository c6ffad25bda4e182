"""The spectral fingerprint of a head's QK bilinear form (paper C, arXiv 2607.06621: spec §C1, §C2, §C4, §X).

A head scores key x_j for query x_i as x_iᵀ M x_j with M = W_Q W_Kᵀ (W_Q, W_K ∈ R^{d×d_k}, TransformerLens's
layout: queries are x W_Q). M has rank at most d_k and is not symmetric, so its spectrum is complex; the
fingerprint says how far M is from symmetric (``dir_frac``), how much of its spectrum is rotation (``D_head``),
and how far it is from normal, each beside a *random-orientation null* with the same singular values.

Everything is float64 and goes through the rank-k core: with M = U S Vᵀ (k singular values above 1e-9·S_0),
the k×k matrix diag(S) Vᵀ U has the nonzero eigenvalues of M and the same traces of powers, so no d×d
eigenproblem is solved. U and V come from QR factors of W_Q and W_K and the SVD of the k×k R_Q R_Kᵀ.

The RoPE features split M by rotary pair: pair t couples dims (t, t + r/2) under TransformerLens's and Llama's
*rotate-half* pairing, dims (2t, 2t+1) under GPT-J's *interleaved* pairing (paper A's and B's models); both
rotate pair t by θ_t = base^(−2t/r). With w_q = W_Q[:, p] + i·W_Q[:, p'] (and w_k alike) for the pair's
dims p, p', M_t = w_q conj(w_k)ᵀ: the rotary part of M is Σ_t Re(M_t), and the score's asymmetry in relative
position is carried by Im(M_t), as score(Δ) − score(−Δ) = Σ_t 2 sin(Δθ_t) nᵀ Im(M_t) n (Δ = key − query).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

RANK_TOLERANCE = 1e-9  # singular values (and M_S's eigenvalues) below this share of the largest are zero
PAIRINGS = ("interleaved", "rotate_half")
#: The metrics the random-orientation null gives a distribution of (spec §C2).
NULL_METRICS = ("dir_frac", "D_head", "imag_mass", "henrici")


def centring(d: int) -> np.ndarray:
    """C = I − 11ᵀ/d: LayerNorm removes the mean of the residual stream, so M acts through C M C."""
    return np.eye(d) - 1.0 / d


@dataclass(frozen=True)
class LowRank:
    """M = U diag(S) Vᵀ over its k nonzero singular values (U, V: d×k orthonormal)."""

    U: np.ndarray
    S: np.ndarray
    V: np.ndarray

    @classmethod
    def of(cls, W_Q: np.ndarray, W_K: np.ndarray, centre: np.ndarray | None = None) -> "LowRank":
        """The nonzero part of M = (C W_Q)(C W_K)ᵀ, C the centring when given, from QR factors of the weights."""
        W_Q, W_K = np.asarray(W_Q, np.float64), np.asarray(W_K, np.float64)
        if centre is not None:
            W_Q, W_K = centre @ W_Q, centre @ W_K
        Q_q, R_q = np.linalg.qr(W_Q)
        Q_k, R_k = np.linalg.qr(W_K)
        u, s, vt = np.linalg.svd(R_q @ R_k.T)
        k = int((s > RANK_TOLERANCE * s[0]).sum()) if s.size and s[0] > 0 else 0
        return cls(U=Q_q @ u[:, :k], S=s[:k], V=Q_k @ vt[:k].T)

    def matrix(self) -> np.ndarray:
        return (self.U * self.S) @ self.V.T

    def core(self) -> np.ndarray:
        """diag(S) Vᵀ U: k×k, with the nonzero eigenvalues of M."""
        return self.S[:, None] * (self.V.T @ self.U)


def spectral_metrics(core: np.ndarray, frobenius2: float, eigenvalues: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """dir_frac, D_head, imag_mass and henrici of an operator from a square matrix with its nonzero spectrum and
    traces of powers (the k×k core, or M itself) and ‖M‖_F²; ``core`` may be a stack (the null's draws), and
    each metric then has one value per draw. ``eigenvalues``: the core's, where the caller has them."""
    trace_m2 = np.einsum("...ij,...ji->...", core, core)  # tr(M²) = tr(core²)
    if eigenvalues is None:
        eigenvalues = np.linalg.eigvals(core)
    modulus, imaginary = np.abs(eigenvalues).sum(-1), np.abs(eigenvalues.imag).sum(-1)
    return {
        # ‖M_A‖_F / ‖M‖_F with M_A = (M − Mᵀ)/2: ‖M_A‖² = (‖M‖² − tr(M²))/2
        "dir_frac": np.sqrt(np.maximum(0.5 * (1.0 - trace_m2 / frobenius2), 0.0)),
        "D_head": imaginary / modulus,
        "imag_mass": imaginary / np.sqrt(frobenius2),
        "henrici": np.sqrt(np.maximum(frobenius2 - (np.abs(eigenvalues) ** 2).sum(-1), 0.0)) / np.sqrt(frobenius2),
    }


def content_pos_frac(M: LowRank | np.ndarray) -> float:
    """Σλ⁺ / Σ|λ| over the nonzero eigenvalues of M_S = (M + Mᵀ)/2. Its range lies in span[U, V], where it is
    solved for a low-rank M; a dense M (d×d) is solved as it is."""
    if isinstance(M, LowRank):
        basis, _ = np.linalg.qr(np.concatenate([M.U, M.V], axis=1))
        M = (basis.T @ M.U * M.S) @ (M.V.T @ basis)
    eigenvalues = np.linalg.eigvalsh((M + M.T) / 2)
    eigenvalues = eigenvalues[np.abs(eigenvalues) > RANK_TOLERANCE * np.abs(eigenvalues).max()]
    return float(eigenvalues[eigenvalues > 0].sum() / np.abs(eigenvalues).sum())


@dataclass(frozen=True)
class EmbeddingMoments:
    """What :func:`self_match` needs of an embedding W_E (n × d), whatever its vocabulary: the Gram matrix
    W_Eᵀ W_E (d × d), the column sums 1ᵀ W_E and n. Made once per model (a V × d pass), then every head costs
    O(d²k)."""

    gram: np.ndarray
    sums: np.ndarray
    n: int

    @classmethod
    def of(cls, W_E: np.ndarray, rows: int = 16384) -> "EmbeddingMoments":
        """In float64, ``rows`` tokens at a time (a 262k-token vocabulary never widens to float64 whole)."""
        W_E = np.asarray(W_E)
        d = W_E.shape[1]
        gram, sums = np.zeros((d, d)), np.zeros(d)
        for start in range(0, len(W_E), rows):
            part = np.asarray(W_E[start : start + rows], np.float64)
            gram += part.T @ part
            sums += part.sum(0)
        return cls(gram=gram, sums=sums, n=len(W_E))


def self_match(M: LowRank, embedding: "EmbeddingMoments | np.ndarray") -> float:
    """(mean diagonal − mean off-diagonal) / RMS of the token-token scores W_E M W_Eᵀ (never formed: V × V), from
    the embedding's moments G = W_EᵀW_E and e = 1ᵀW_E: the diagonal sums to tr(M G), all entries to e M eᵀ, the
    squares to tr(M G Mᵀ G); M through its rank-k factors."""
    moments = embedding if isinstance(embedding, EmbeddingMoments) else EmbeddingMoments.of(embedding)
    G, e, n = moments.gram, moments.sums, moments.n
    GU, GV = G @ M.U, G @ M.V
    diagonal_sum = float(np.sum((M.U * M.S) * GV))  # tr(U S Vᵀ G)
    total = float(((e @ M.U) * M.S) @ (M.V.T @ e))
    squares = float(np.sum(((M.S[:, None] * (M.V.T @ GV)) * M.S[None, :]) * (M.U.T @ GU).T))  # tr(S VᵀGV S UᵀGU)
    off_diagonal_mean = (total - diagonal_sum) / (n * n - n)
    return float((diagonal_sum / n - off_diagonal_mean) / np.sqrt(squares / (n * n)))


def head_fingerprint(W_Q: np.ndarray, W_K: np.ndarray, centre: np.ndarray | None = None) -> dict[str, float]:
    """The static metrics of one head (§C2) but self_match (it needs the embedding: :func:`self_match`).

    A head narrower than half the model goes through the rank-k core; a wider one (paper A's single head of
    128 in a width of 128) through M itself, which is then no larger than the core and needs no factorisation."""
    return _fingerprint(W_Q, W_K, centre)[0]


def _fingerprint(W_Q: np.ndarray, W_K: np.ndarray, centre: np.ndarray | None) -> tuple[dict[str, float], np.ndarray]:
    """:func:`head_fingerprint` and M's nonzero singular values (what the null keeps)."""
    W_Q, W_K = np.asarray(W_Q, np.float64), np.asarray(W_K, np.float64)
    d, k = W_Q.shape
    if 2 * k < d:
        low = LowRank.of(W_Q, W_K, centre)
        core, singular, symmetric_of = low.core(), low.S, low
    else:
        core = (W_Q @ W_K.T) if centre is None else centre @ W_Q @ W_K.T @ centre
        singular, symmetric_of = np.linalg.svd(core, compute_uv=False), core
        singular = singular[singular > RANK_TOLERANCE * singular[0]]
    frobenius2, rank = float(np.sum(singular**2)), len(singular)
    eigenvalues, vectors = np.linalg.eig(core)
    if rank < len(core):  # M's zero eigenvalues are not part of its spectrum
        keep = np.argsort(-np.abs(eigenvalues))[:rank]
        eigenvalues, vectors = eigenvalues[keep], vectors[:, keep]
    metrics = {name: float(value) for name, value in spectral_metrics(core, frobenius2, eigenvalues).items()}
    row = {"rank": rank, **metrics, "cond_eig": float(np.linalg.cond(vectors)), "content_pos_frac": content_pos_frac(symmetric_of)}
    return row, singular


def null_seed(layer: int, head: int, base: int = 0) -> int:
    """The null's seed of head ``head`` of layer ``layer``: base + 1000·layer + head (the authors')."""
    return base + 1000 * layer + head


def random_frames(d: int, k: int, draws: int, rng: np.random.Generator, centre: np.ndarray | None = None) -> np.ndarray:
    """``draws`` Haar-random orthonormal d×k frames: QR of Gaussians (columns signed so that R's diagonal is
    positive), projected by the centring first when given."""
    gaussian = rng.standard_normal((draws, d, k))
    if centre is not None:
        gaussian = centre @ gaussian
    frames, triangular = np.linalg.qr(gaussian)
    return frames * np.sign(np.diagonal(triangular, axis1=-2, axis2=-1))[..., None, :]


def random_orientations(d: int, k: int, draws: int, rng: np.random.Generator) -> np.ndarray:
    """Q_2ᵀQ_1 of two independent Haar-random orthonormal d×k frames, for each draw (draws × k × k).

    By rotation invariance Q_2ᵀQ_1 is distributed as the top k×k block of one Haar frame Q = G R⁻¹ (G Gaussian,
    GᵀG = RᵀR). With G = [A; B], A the top k×k, GᵀG = AᵀA + BᵀB and BᵀB is Wishart(d − k, I) (Bartlett's
    construction), so the block A R⁻¹ costs O(k³) per draw rather than two QRs of d×k. Where d < 2k (too few
    dimensions left for the construction) the frames are drawn whole."""
    if d < 2 * k:
        frames = random_frames(d, k, 2 * draws, rng)
        return np.swapaxes(frames[1::2], -1, -2) @ frames[0::2]
    top = rng.standard_normal((draws, k, k))
    bartlett = np.zeros((draws, k, k))
    below = np.tril_indices(k, -1)
    bartlett[:, below[0], below[1]] = rng.standard_normal((draws, len(below[0])))
    bartlett[:, np.arange(k), np.arange(k)] = np.sqrt(rng.chisquare(d - k - np.arange(k), size=(draws, k)))
    gram = np.swapaxes(top, -1, -2) @ top + bartlett @ np.swapaxes(bartlett, -1, -2)
    lower = np.linalg.cholesky(gram)  # GᵀG = L Lᵀ, R = Lᵀ
    return np.swapaxes(np.linalg.solve(lower, np.swapaxes(top, -1, -2)), -1, -2)  # A L⁻ᵀ


def null_distribution(S: np.ndarray, d: int, draws: int = 300, seed: int = 0, centred: bool = False) -> dict[str, np.ndarray]:
    """The random-orientation (Ginibre) null of a head with singular values S in d dimensions: for each draw,
    the core diag(S)·Q_2ᵀQ_1 of random orthonormal frames Q_1, Q_2 (§C2). For a LayerNorm model (``centred``)
    the frames lie in the centred subspace, whose d − 1 dimensions are what the draw sees. Returns each of
    NULL_METRICS per draw."""
    orientations = random_orientations(d - 1 if centred else d, len(S), draws, np.random.default_rng(seed))
    return spectral_metrics(S[:, None] * orientations, float(np.sum(S**2)))


def with_null(
    W_Q: np.ndarray, W_K: np.ndarray, seed: int, draws: int = 300, centre: np.ndarray | None = None
) -> dict[str, float]:
    """:func:`head_fingerprint` plus, for each of NULL_METRICS, the null's mean and sd and the head's z-score."""
    row, singular = _fingerprint(W_Q, W_K, centre)
    null = null_distribution(singular, len(np.asarray(W_Q)), draws, seed, centre is not None)
    for name in NULL_METRICS:
        mean, sd = float(null[name].mean()), float(null[name].std())
        row |= {f"{name}_null_mean": mean, f"{name}_null_sd": sd, f"{name}_z": (row[name] - mean) / sd}
    return row


# --------------------------------------------------------------------------- RoPE


def pair_dims(rotary_dim: int, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    """The two dims of each rotary pair t = 0..r/2−1: (2t, 2t+1) interleaved, (t, t + r/2) rotate-half."""
    half = np.arange(rotary_dim // 2)
    if pairing == "interleaved":
        return 2 * half, 2 * half + 1
    if pairing == "rotate_half":
        return half, half + rotary_dim // 2
    raise ValueError(f"pairing={pairing!r}: expected one of {PAIRINGS}")


def frequencies(rotary_dim: int, base: float = 10000.0) -> np.ndarray:
    """θ_t = base^(−2t/r), t = 0..r/2−1 (t = 0 the fastest)."""
    return base ** (-2.0 * np.arange(rotary_dim // 2) / rotary_dim)


def rotate(x: np.ndarray, positions: np.ndarray, rotary_dim: int, pairing: str, base: float = 10000.0) -> np.ndarray:
    """RoPE on the rows of x (T × d_k) at ``positions``: pair t turned by positions·θ_t, counter-clockwise
    (x_p + i x_p' times e^{i·pos·θ_t}), as GPT-J (interleaved) and TransformerLens (rotate-half) do."""
    first, second = pair_dims(rotary_dim, pairing)
    angles = np.asarray(positions, np.float64)[:, None] * frequencies(rotary_dim, base)[None]
    x = np.asarray(x)
    cos, sin = np.cos(angles).astype(x.dtype), np.sin(angles).astype(x.dtype)  # in x's precision
    out = x.copy()
    a, b = x[:, first], x[:, second]
    out[:, first], out[:, second] = a * cos - b * sin, a * sin + b * cos
    return out


def pair_operators(W_Q: np.ndarray, W_K: np.ndarray, rotary_dim: int, pairing: str) -> np.ndarray:
    """M_t = w_q^t conj(w_k^t)ᵀ of every pair t (r/2 × d × d, complex): brute force, for checks and ablations."""
    first, second = pair_dims(rotary_dim, pairing)
    w_q = W_Q[:, first] + 1j * W_Q[:, second]
    w_k = W_K[:, first] + 1j * W_K[:, second]
    return np.einsum("it,jt->tij", w_q, np.conj(w_k))


def relative_kernel(
    n: np.ndarray, W_Q: np.ndarray, W_K: np.ndarray, deltas: np.ndarray, rotary_dim: int, pairing: str, base: float = 10000.0
) -> tuple[np.ndarray, np.ndarray]:
    """The score of residual n against itself at each relative offset Δ (key − query) as its even and odd parts,
    score(Δ) = even(Δ) + odd(Δ) (float64, from the weights' own precision):

    even(Δ) = nᵀ M_rest n + Σ_t cos(Δθ_t) nᵀ Re(M_t) n  (M_rest: the dims past ``rotary_dim``, which do not rotate),
    odd(Δ)  = Σ_t sin(Δθ_t) nᵀ Im(M_t) n,

    so score(Δ) − score(−Δ) = 2·odd(Δ), and the Im(M_t) ablation, which subtracts odd, leaves the even kernel."""
    n, W_Q, W_K = (np.asarray(a, np.float64) for a in (n, W_Q, W_K))
    angles = np.asarray(deltas, np.float64)[:, None] * frequencies(rotary_dim, base)[None]
    operators = pair_operators(W_Q, W_K, rotary_dim, pairing)
    real, imaginary = (np.einsum("i,tij,j->t", n, part, n) for part in (operators.real, operators.imag))
    rest = np.arange(rotary_dim, W_Q.shape[1])
    static = float((n @ W_Q[:, rest]) @ (n @ W_K[:, rest]))
    return static + np.cos(angles) @ real, np.sin(angles) @ imaginary


def pair_norms(W_Q: np.ndarray, W_K: np.ndarray, rotary_dim: int, pairing: str) -> tuple[np.ndarray, np.ndarray]:
    """‖Re M_t‖_F and ‖Im M_t‖_F of every pair, in closed form from the pair's four columns: with w_q = a + ic and
    w_k = b + id, Re M_t = abᵀ + cdᵀ and Im M_t = cbᵀ − adᵀ, so ‖Re‖² = |a|²|b|² + |c|²|d|² + 2(a·c)(b·d) and
    ‖Im‖² = |c|²|b|² + |a|²|d|² − 2(a·c)(b·d)."""
    first, second = pair_dims(rotary_dim, pairing)
    W_Q, W_K = np.asarray(W_Q, np.float64), np.asarray(W_K, np.float64)
    a, c, b, d = W_Q[:, first], W_Q[:, second], W_K[:, first], W_K[:, second]
    aa, bb, cc, dd = (a * a).sum(0), (b * b).sum(0), (c * c).sum(0), (d * d).sum(0)
    cross = (a * c).sum(0) * (b * d).sum(0)
    real = np.sqrt(np.maximum(aa * bb + cc * dd + 2 * cross, 0.0))
    imaginary = np.sqrt(np.maximum(cc * bb + aa * dd - 2 * cross, 0.0))
    return real, imaginary


def rope_features(W_Q: np.ndarray, W_K: np.ndarray, rotary_dim: int, pairing: str, base: float = 10000.0) -> dict[str, float]:
    """rope_imag_frac, freq_centroid and hi_freq_dir of one head (§C4)."""
    real, imaginary = pair_norms(W_Q, W_K, rotary_dim, pairing)
    theta = frequencies(rotary_dim, base)
    total = imaginary.sum()
    return {
        "rope_imag_frac": float(total / (real.sum() + total)),
        "freq_centroid": float((theta * imaginary).sum() / total),
        "hi_freq_dir": float(imaginary[: max(1, len(theta) // 2)].sum() / total),  # t < r/4: the faster half
    }
