"""Exact AUCs in bounded memory: the AUC scores the driver holds above its budget go to a temp file.

Used by :class:`~.aggregate.Accumulator` once its in-memory scores pass ``auc_memory_mb``. Each block's
scores of one (slice column, model) are written laid out by *value bucket*, then slot (slice value,
label), ascending within each piece; the bucket edges are chosen per model from the scores held when
spilling starts. Finalize then reads the buckets back in passes (a run of consecutive buckets that fits
the pass budget: one explicit read per block and pass, into a fresh buffer; nothing is memory-mapped,
mapped pages would count in the process's memory). Buckets are value ranges ``[lo, hi)``, so every
score of a bucket is above every score of the buckets before it and ties never straddle two buckets:

    2U = sum over buckets b of (2U within b + 2 * positives in b * negatives below b)

per slice value and over all rows, each term an exact integer: the same bits as the in-memory merge
whatever the edges. A pass holds about its budget; a single bucket larger than that (one score value
tied across most rows) is read whole.

The temp file has no name on disk (:func:`tempfile.TemporaryFile`: ``O_TMPFILE`` on Linux, else
unlinked at once), so nothing is left behind even when the process is killed; closing it (always, in a
``finally``) frees the space. It should be on a disk (``spill_dir``; default: ``TMPDIR``, ``/tmp``): a
tmpfs keeps the bytes in memory (not in this process's, but the node's).
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from airflow_ray_provider.workloads.evaluation import metrics

if TYPE_CHECKING:
    from types import TracebackType

#: Value buckets per model (a pass is one or more consecutive buckets; more buckets cost metadata).
BUCKETS = 16
#: Every how many held scores one is sampled to choose the bucket edges.
SAMPLE_STEP = 64
#: Bytes a pass holds per score it reads: the read buffer, the slot-ordered copy, two int32 indices.
PASS_BYTES_PER_SCORE = 24


class SpillFile:
    """An unnamed temp file that float64 arrays are appended to and read back from by offset.

    Appends come from one thread; reads are positional (``os.preadv``), so several threads may read.

    :param directory: where the file lives (``None``: the system temp dir).
    """

    def __init__(self, directory: str | None = None) -> None:
        # closed by close() / __exit__: the file lives as long as this object
        self._file = tempfile.TemporaryFile(prefix="eval-auc-spill-", dir=directory)  # noqa: SIM115
        self._fd = self._file.fileno()
        self.size = 0

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` ran (the space is freed then)."""
        return self._file.closed

    def append(self, data: np.ndarray) -> int:
        """Write ``data`` (float64) at the end; returns its offset in bytes."""
        offset, view = self.size, np.ascontiguousarray(data, dtype=np.float64).data.cast("B")
        done = 0
        while done < len(view):
            done += os.pwrite(self._fd, view[done:], offset + done)
        self.size += len(view)
        return offset

    def read_into(self, out: np.ndarray, offset: int) -> None:
        """Fill ``out`` (a contiguous float64 array) from byte ``offset``."""
        view = out.data.cast("B")
        done = 0
        while done < len(view):
            got = os.preadv(self._fd, [view[done:]], offset + done)
            if got <= 0:
                raise OSError(f"spill file ended at byte {offset + done} ({self.size} written)")
            done += got

    def close(self) -> None:
        """Close (and so delete) the file; later calls do nothing."""
        self._file.close()

    def __enter__(self) -> SpillFile:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def bucket_edges(samples: np.ndarray, buckets: int = BUCKETS) -> np.ndarray:
    """Up to ``buckets - 1`` ascending interior edges at the quantiles of ``samples`` (distinct)."""
    if len(samples) == 0 or buckets <= 1:
        return np.zeros(0)
    ordered = np.sort(samples)
    picks = ordered[(np.arange(1, buckets) * len(ordered)) // buckets]
    return np.unique(picks[np.isfinite(picks)])


@dataclass(frozen=True)
class _Record:
    """One block's spilled scores of one (column, model).

    :param keys: the slot keys present (``2 * slice id + label``), ascending.
    :param sizes: ``(buckets, len(keys))`` piece sizes, stored row-major (bucket, then slot).
    :param offset: where the record starts in the spill file (bytes).
    """

    keys: np.ndarray
    sizes: np.ndarray
    offset: int


@dataclass
class TwiceU:
    """Running ``2U`` of one slice value (or all rows) across passes."""

    twice_u: int = 0
    pos: int = 0
    neg: int = 0

    def add(self, pos: np.ndarray, neg: np.ndarray) -> None:
        """Add one bucket range's sorted scores (every earlier pass's scores are below these)."""
        self.twice_u += metrics.twice_u_sorted(pos, neg) + 2 * len(pos) * self.neg
        self.pos += len(pos)
        self.neg += len(neg)

    @property
    def auc(self) -> float | None:
        """The AUC (``None`` when a class is absent)."""
        return metrics.auc_from_twice_u(self.twice_u, self.pos, self.neg)


class SpilledScores:
    """The spilled AUC scores of one (slice column, model), and their exact AUCs.

    :param store: the spill file (shared by every column and model).
    :param edges: this model's bucket edges (:func:`bucket_edges`).
    """

    def __init__(self, store: SpillFile, edges: np.ndarray) -> None:
        self.store, self.edges = store, edges
        self.records: list[_Record] = []

    def add(self, gids: np.ndarray, counts: np.ndarray, sorted_scores: np.ndarray) -> None:
        """Spill one block's scores, given as the block hands them (see :class:`.block.BlockPartial`).

        :param gids: the global slice id of each of the block's local slice values.
        :param counts: scores per local slot ``2 * local value + label``; ``sorted_scores`` holds them
            in that order, ascending within each slot.
        """
        present = np.flatnonzero(counts)
        if not len(present):
            return
        keys = gids[present // 2] * 2 + present % 2
        order = np.argsort(keys, kind="stable")
        n_keys, n_buckets = len(present), len(self.edges) + 1
        rank = np.empty(len(present), dtype=np.int64)
        rank[order] = np.arange(n_keys)
        slot = np.repeat(rank, counts[present])  # each score's slot, in global slot order
        bucket = np.searchsorted(self.edges, sorted_scores, side="right")
        sizes = np.bincount(bucket * n_keys + slot, minlength=n_buckets * n_keys).reshape(n_buckets, n_keys)
        starts = np.concatenate(([0], np.cumsum(counts)))[present][order]
        # a slot's scores are ascending, so each (slot, bucket) piece is one run of the block's array
        src = starts[None, :] + np.cumsum(sizes, axis=0) - sizes
        self.records.append(
            _Record(
                keys[order], sizes.astype(np.int32), self.store.append(_gather(sorted_scores, src, sizes))
            )
        )

    def aucs(self, pass_scores: int, overall: bool) -> tuple[dict[int, TwiceU], TwiceU | None]:
        """Per slice id its :class:`TwiceU`, and all rows' when ``overall``, in passes over the buckets.

        :param pass_scores: scores one pass may read (at least one bucket is read).
        """
        per_value: dict[int, TwiceU] = {}
        total = TwiceU() if overall else None
        for low, high in self._passes(pass_scores):
            scores, keys, bounds = self._read_pass(low, high)
            n_pos = 0
            for i, key in enumerate(keys):
                scores[bounds[i] : bounds[i + 1]].sort()
                if key % 2:
                    n_pos = int(bounds[i + 1])
            by_key = {int(k): scores[bounds[i] : bounds[i + 1]] for i, k in enumerate(keys)}
            empty = np.zeros(0)
            for gid in sorted({k // 2 for k in by_key}):
                per_value.setdefault(gid, TwiceU()).add(
                    by_key.get(2 * gid + 1, empty), by_key.get(2 * gid, empty)
                )
            if total is not None:
                pos, neg = scores[:n_pos], scores[n_pos:]
                pos.sort()
                neg.sort()
                total.add(pos, neg)
        return per_value, total

    def _passes(self, pass_scores: int) -> list[tuple[int, int]]:
        """Consecutive bucket ranges ``[low, high)`` of at most ``pass_scores`` scores (or one bucket)."""
        per_bucket = np.zeros(len(self.edges) + 1, dtype=np.int64)
        for r in self.records:
            per_bucket += r.sizes.sum(axis=1, dtype=np.int64)
        out, low, held = [], 0, 0
        for b, n in enumerate(per_bucket.tolist()):
            if held and held + n > pass_scores:
                out.append((low, b))
                low, held = b, 0
            held += n
        if held:
            out.append((low, len(per_bucket)))
        return out

    def _read_pass(self, low: int, high: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Buckets ``[low, high)`` of every record, ordered by slot (positives first), runs unsorted.

        :returns: the scores, the slot keys in their order, and each key's bounds in the scores.
        """
        keys, sizes = [], []
        for r in self.records:
            part = r.sizes[low:high]
            keys.append(np.broadcast_to(r.keys, part.shape).ravel())
            sizes.append(part.ravel().astype(np.int64))
        flat_keys, flat_sizes = np.concatenate(keys), np.concatenate(sizes)
        raw = np.empty(int(flat_sizes.sum()))
        held = 0
        for r, part in zip(self.records, sizes, strict=True):
            count = int(part.sum())
            if count:
                before = int(r.sizes[:low].sum(dtype=np.int64))
                self.store.read_into(raw[held : held + count], r.offset + 8 * before)
            held += count
        src = np.cumsum(flat_sizes) - flat_sizes
        used = flat_sizes > 0
        flat_keys, flat_sizes, src = flat_keys[used], flat_sizes[used], src[used]
        order = np.lexsort((flat_keys, 1 - flat_keys % 2))  # positives first, by slice id within
        flat_keys, flat_sizes = flat_keys[order], flat_sizes[order]
        scores = _gather(raw, src[order], flat_sizes)
        del raw
        last = np.flatnonzero(np.append(flat_keys[1:] != flat_keys[:-1], True))
        return scores, flat_keys[last], np.concatenate(([0], np.cumsum(flat_sizes)[last]))


def _gather(values: np.ndarray, src: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """The runs ``values[src[i] : src[i] + sizes[i]]`` one after another (flattened in C order)."""
    flat_src, flat = src.ravel(), sizes.ravel()
    total = int(flat.sum())
    kind: Any = np.int32 if len(values) < 2**31 else np.int64
    dst = np.cumsum(flat) - flat
    index = np.repeat((flat_src - dst).astype(kind), flat)
    index += np.arange(total, dtype=kind)
    return values[index]
