"""How a search is cut into blocks and tiles of scores, and how those run on threads.

Work is done in row blocks of the query matrix; a block holds at most ``block_bytes`` of float32
scores (:func:`block_rows`; default :data:`DEFAULT_BLOCK_BYTES`, or ``$BACKRETRIEVAL_BLOCK_BYTES``),
so peak extra memory is independent of the number of queries and linear in the database size.
Where a row block would be thin (fewer than :data:`TILE_MIN_ROWS` rows), a caller that can add up
column tiles (the rank and nearest-item kernels) gets tiles of :data:`TILE_ROWS` rows x the
columns that fit instead (:func:`tiles`: BLAS packs the whole database for every product, so thin
blocks read it again and again). :func:`map_blocks` runs a
kernel's block function over them, in threads with single-threaded BLAS where the work is large
enough, and hands the results back in block order. Nothing here changes a number: the kernels
(:mod:`.kernels`) add integers and decide on canonical scores, so the cut and the threads only
change memory and speed.
"""
from __future__ import annotations

import os
import sys
from typing import Any, Iterator

DEFAULT_BLOCK_BYTES = 64 * 2**20


def default_block_bytes() -> int:
    """``$BACKRETRIEVAL_BLOCK_BYTES`` if set (e.g. to bound memory on a small machine), else
    :data:`DEFAULT_BLOCK_BYTES`. Results never depend on it, only memory and speed do."""
    env = os.environ.get("BACKRETRIEVAL_BLOCK_BYTES")
    if not env:
        return DEFAULT_BLOCK_BYTES
    try:
        value = int(env)
    except ValueError:
        raise ValueError(f"BACKRETRIEVAL_BLOCK_BYTES={env!r} is not a number of bytes") from None
    if value < 1:
        raise ValueError(f"BACKRETRIEVAL_BLOCK_BYTES={env!r} must be positive")
    return value


def block_rows(n_cols: int, block_bytes: int | None = None) -> int:
    """How many rows of an (rows, n_cols) float32 score block fit in ``block_bytes`` (default:
    :func:`default_block_bytes`)."""
    budget = default_block_bytes() if block_bytes is None else int(block_bytes)
    return max(1, budget // (4 * max(1, n_cols)))


def row_blocks(n: int, size: int) -> Iterator[slice]:
    """Consecutive slices of ``size`` rows (the last one shorter) covering ``range(n)``."""
    for start in range(0, n, size):
        yield slice(start, min(n, start + size))


PARALLEL_MIN_WORK = 2e7  # multiply-adds below which a search runs in the calling thread only
PARALLEL_BLOCK_BYTES = 32 * 2**20  # score block per thread when blocks run in threads (counting kernels tile columns for the cache; larger blocks keep BLAS efficient at large N)


_BLAS: tuple[int, Any] | None = None  # (len(sys.modules) when built, threadpoolctl controller of the BLAS libraries)


def blas_controller() -> Any:
    """threadpoolctl's controller of the loaded BLAS libraries, built once per set of imported
    modules (a new import may load another BLAS): building one scans every loaded shared library,
    which at N = 1,500 would cost more than a metric's own work if done on every call."""
    global _BLAS
    key = len(sys.modules)
    if _BLAS is None or _BLAS[0] != key:
        from threadpoolctl import ThreadpoolController

        _BLAS = (key, ThreadpoolController().select(user_api="blas"))
    return _BLAS[1]


def blas_threads() -> int:
    """How many threads BLAS may use now (threadpoolctl; 1 inside single-threaded workers)."""
    return max((int(lib.num_threads or 1) for lib in blas_controller().lib_controllers), default=1)


TILE_MIN_ROWS = 512  # a row block with fewer rows is split into tiles (only where the caller can take column tiles)
TILE_ROWS = 1024  # rows of a tile


def tiles(n_rows: int, n_cols: int, block_bytes: int, split_cols: bool) -> Iterator[tuple[slice, slice]]:
    """(rows, columns) of the blocks of an (n_rows, n_cols) score matrix, each at most
    ``block_bytes`` of float32: whole rows where that gives at least :data:`TILE_MIN_ROWS` rows
    (or ``split_cols`` is False), else tiles of :data:`TILE_ROWS` rows. Why: BLAS packs all of the
    right-hand matrix for every product, so a product of few rows against a large database is
    dominated by reading the database (at N = 100,000 and 83-row blocks, all of D -- 200 MB --
    once per 83 rows); a tile of 1,024 rows reads only its columns' part, 12x less in all."""
    step = block_rows(n_cols, block_bytes)
    if not split_cols or step >= min(TILE_MIN_ROWS, n_rows):
        for rows in row_blocks(n_rows, step):
            yield rows, slice(0, n_cols)
        return
    r_step = min(n_rows, TILE_ROWS)
    c_step = max(1, block_bytes // (4 * r_step))
    for rows in row_blocks(n_rows, r_step):
        for cols in row_blocks(n_cols, c_step):
            yield rows, cols


def map_blocks(fn, n_rows: int, n_cols: int, d: int, block_bytes: int | None, *, split_cols: bool = False):
    """``fn(rows)`` for each row block of an (n_rows, n_cols) score matrix, yielded in block order;
    with ``split_cols``, ``fn(rows, cols)`` for each block or tile of :func:`tiles`.

    With several BLAS threads and enough work, the blocks run in that many Python threads, each
    with single-threaded BLAS: one thread's counting overlaps the other's product, and a block is
    counted while it is still in cache. The memory budget ``block_bytes`` is shared by the
    threads. Results come back in block order; the kernels add integers, so which thread ran a
    block never changes a number. At most ``2 * threads`` blocks are in flight and each result is
    dropped once the caller has consumed it, so memory does not grow with the number of blocks
    (a block's result may hold an array of n_cols counts: at N = 100,000 and 20-row blocks,
    keeping them all would cost 4 GB)."""
    budget = default_block_bytes() if block_bytes is None else int(block_bytes)
    threads = 1
    if float(n_rows) * n_cols * d >= PARALLEL_MIN_WORK:
        threads = min(blas_threads(), max(1, n_rows // 2))
    call = fn if split_cols else (lambda rows, cols: fn(rows))
    if threads <= 1:
        for rows, cols in tiles(n_rows, n_cols, budget, split_cols):
            yield call(rows, cols)
        return
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    per_thread = max(1, min(budget // threads, PARALLEL_BLOCK_BYTES))
    with blas_controller().limit(limits=1), ThreadPoolExecutor(threads) as pool:
        pending: deque = deque()
        try:
            for rows, cols in tiles(n_rows, n_cols, per_thread, split_cols):
                pending.append(pool.submit(call, rows, cols))
                if len(pending) >= 2 * threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()

