"""Search kernels: blocked exact nearest neighbours, rank of the true item, CSLS (kernels.py) with
their one-read counting passes (_fused.py); canonical scores and unit rows (exact.py); how a
search is cut into blocks and run on threads (blocks.py); exact sort order and average ranks
(ranking.py); the FAISS backend for approximate search with its self-check (faiss_backend.py) and
the cost model that weighs it against exact search (faiss_cost.py).

Every metric searches through these functions; none of them holds a full N x N matrix.
"""
from .blocks import DEFAULT_BLOCK_BYTES, block_rows
from .exact import l2_normalize, unit_rows
from .kernels import csls_penalty, nearest_with_ties, rank_of_true, ranks_against_rows, ranks_both_ways, topk
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
