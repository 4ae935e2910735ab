"""Search kernels: blocked exact nearest neighbours, rank of the true item, CSLS (kernels.py);
exact sort order and average ranks (ranking.py).

Every metric searches through these functions; none of them holds a full N x N matrix.
"""
from .kernels import (
    DEFAULT_BLOCK_BYTES,
    block_rows,
    csls_penalty,
    l2_normalize,
    nearest_with_ties,
    rank_of_true,
    ranks_both_ways,
    ranks_against_rows,
    topk,
    unit_rows,
)
from .ranking import average_ranks, sort_order, weighted_average_ranks

__all__ = [
    "DEFAULT_BLOCK_BYTES",
    "average_ranks",
    "block_rows",
    "csls_penalty",
    "l2_normalize",
    "nearest_with_ties",
    "rank_of_true",
    "ranks_both_ways",
    "sort_order",
    "ranks_against_rows",
    "topk",
    "unit_rows",
    "weighted_average_ranks",
]
