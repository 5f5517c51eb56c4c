"""Pools' locks, records and leases on this machine: a folder per pool under the local registry.

``<registry>/pools/<pool>/`` holds ``lock`` (an ``flock``: one decider at a time across processes and
threads; the OS drops it when its holder dies), ``record.json`` and ``leases/<holder>.json`` (one file per
holder with its expiry, so renewing needs no lock). Every file is written to a temporary name and renamed
over the old one: a reader never sees half a record. The lock file itself is never removed (a waiter holds
it open; a new one would let two deciders in). Plain data, as the pool's lease store interface asks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from airflow_ray_provider.local.cluster import read_json, registry_dir, write_json

#: Seconds between tries of a lock another holder has.
LOCK_RETRY_S = 0.05


class LocalLeaseStore:
    """The lease store of this machine's pools (see the module's docstring).

    :param root: the folder of every pool's folder (default: ``pools/`` in the local registry).
    """

    def __init__(self, root: Path | None = None) -> None:
        self.root = root or registry_dir() / "pools"

    def _folder(self, pool: str) -> Path:
        return self.root / pool

    def _lease_path(self, pool: str, holder: str) -> Path:
        return self._folder(pool) / "leases" / f"{quote(holder, safe='')}.json"

    @contextlib.contextmanager
    def lock(self, pool: str, *, timeout: float) -> Iterator[None]:
        """Hold the pool's lock; ``TimeoutError`` after ``timeout`` seconds."""
        folder = self._folder(pool)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd = os.open(folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        held = f"pool {pool!r}: its lock is still held after {timeout:g} s"
                        raise TimeoutError(held) from None
                    time.sleep(LOCK_RETRY_S)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)

    def read(self, pool: str) -> tuple[dict[str, Any] | None, dict[str, float]]:
        """The pool's record (``None``: none) and every lease's expiry, expired ones too."""
        leases: dict[str, float] = {}
        for path in sorted((self._folder(pool) / "leases").glob("*.json")):
            lease = read_json(path)
            if lease is not None:
                leases[str(lease["holder"])] = float(lease["expires"])
        return read_json(self._folder(pool) / "record.json"), leases

    def write(self, pool: str, record: dict[str, Any] | None) -> None:
        """Replace the pool's record; ``None`` forgets the pool and its leases (the lock file stays)."""
        if record is not None:
            write_json(self._folder(pool) / "record.json", record)
            return
        for path in (self._folder(pool) / "leases").glob("*.json"):
            path.unlink(missing_ok=True)
        (self._folder(pool) / "record.json").unlink(missing_ok=True)

    def renew(self, pool: str, holder: str, expires: float) -> None:
        """Take or renew ``holder``'s lease until ``expires`` (epoch seconds)."""
        write_json(self._lease_path(pool, holder), {"holder": holder, "expires": expires})

    def release(self, pool: str, holder: str) -> None:
        """End ``holder``'s lease (nothing if it has none)."""
        self._lease_path(pool, holder).unlink(missing_ok=True)

    def pools(self) -> list[str]:
        """Every pool with a record."""
        return sorted(path.parent.name for path in self.root.glob("*/record.json"))
