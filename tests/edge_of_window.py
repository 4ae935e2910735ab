"""An adversarial fast pass for the search kernels: every fast score at the edge of the window.

The kernels trust the fast float32 pass to within ``tau`` (:func:`backretrieval.search.exact.score_error_bound`)
of the canonical score and re-decide only comparisons inside that window. :func:`at_edge` replaces
the fast pass by the canonical score moved by ``EDGE * tau``, in a seeded random direction per pair:
an exact tie is pushed below (or above) its threshold by almost the whole window, and a pair of tied
items is pulled apart by almost two windows -- the largest error the bound allows. With the true
bound every decision must survive it. With ``shrink`` < 1 the kernels are given a bound that is too
narrow (the perturbation still uses the true one): then the pushed ties fall outside their windows
and decisions change, which proves that the perturbation reaches the edge.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest

from backretrieval.search import exact, kernels
from backretrieval.search.exact import max_row_norm, scores_block

EDGE = 1.0 - 2.0**-8  # fraction of the window


def _push(c: np.ndarray, tau: float, rng: np.random.Generator) -> np.ndarray:
    """``c`` (canonical float32 scores) moved by ``EDGE * tau`` up or down per element, as float32,
    rounded towards ``c`` so that no element leaves ``EDGE * tau``."""
    c64 = c.astype(np.float64)
    step = EDGE * tau
    out = (c64 + step * rng.choice(np.array([-1.0, 1.0]), size=c.shape)).astype(np.float32)
    over = np.abs(out.astype(np.float64) - c64) > step
    out[over] = np.nextafter(out[over], c[over])
    return np.ascontiguousarray(out)


@contextlib.contextmanager
def at_edge(seed: int, shrink: float | None = None, calls: list | None = None):
    """Within the block, the fast pass of every kernel returns scores at ``EDGE * tau`` from the
    canonical ones (:class:`kernels._Fast` blocks, and the bare ``_gemm`` of BkR's step 4). With
    ``shrink``, the kernels use ``shrink * tau`` as their window. ``calls``: gets
    ``(route, shape)`` per fast block (``"sparse"``, ``"dense"`` or ``"gemm"``)."""
    rng = np.random.default_rng(seed)
    true_bound = exact.score_error_bound

    def block(self, rows, cols=slice(None)):
        Q, D = self.Q[rows], self.D[cols]
        qb = None if self.q_bias is None else np.asarray(self.q_bias)[rows]
        db = None if self.d_bias is None else np.asarray(self.d_bias)[cols]
        c = scores_block(Q, D, scale=self.scale, q_bias=qb, d_bias=db)
        if calls is not None:
            calls.append(("sparse" if self._sparse is not None else "dense", c.shape))
        tau = true_bound(self.Q.shape[1], self.norm_q, self.norm_d, self.scale, self.q_bias, self.d_bias)
        return _push(c, tau, rng)

    def gemm(A, B):  # ranks_against_rows: inner products of unit rows, no scale or biases
        if calls is not None:
            calls.append(("gemm", (A.shape[0], B.shape[0])))
        return _push(scores_block(A, B), true_bound(A.shape[1], max_row_norm(A), max_row_norm(B)), rng)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(kernels._Fast, "block", block)
        mp.setattr(kernels, "_gemm", gemm)
        if shrink is not None:
            mp.setattr(kernels, "score_error_bound", lambda *a, **k: shrink * true_bound(*a, **k))
        yield
