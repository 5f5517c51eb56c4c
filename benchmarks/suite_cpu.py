"""Where a command's CPU goes, by kind of process: Ray's head daemons, its workers, job drivers, pytest.

Run (root, Debian's ``acct`` package for ``accton``)::

    python -m benchmarks.suite_cpu -- make test
    python -m benchmarks.suite_cpu --pacct FILE --procs FILE --since EPOCH --until EPOCH   # read a past run

``make test`` prints the CPU each *test* was charged (a cgroup per test); this adds what *kind* of
process burnt it, which the cgroups cannot tell: a shared Ray head's dashboard and a job driver on it
land in the same test's group. Linux process accounting writes one record per exited process (CPU of
all its threads, pid, parent pid, start time); a sampler thread reads ``/proc`` every half second for
each new process's command line, and for Ray workers every title they take (``ray::JobSupervisor``,
``ray::ScoringActor``...). Records and command lines are joined by pid and start time.

Limits: accounting is machine-wide (the run counts only processes started while it ran, anyone's); a
process that lived less than the sampling gap has no command line and is named by the kernel's
``comm`` of its last thread; a process still running at the end is not counted. Output: a table on
stdout, and ``benchmarks/out/suite_cpu.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

#: ``struct acct_v3`` (linux/acct.h): flag, version, tty, exitcode, uid, gid, pid, ppid, btime, etime
#: (float, ticks), then utime, stime and six more ``comp_t``, then ``comm``.
ACCT_V3 = struct.Struct("<BBHIIIIIIf8H16s")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
SAMPLE_GAP_S = 0.5
#: The sampler's first line: the boot time its start ticks count from.
BOOT_TIME_HEADER = "# btime "
OUT = Path(__file__).resolve().parent / "out" / "suite_cpu.json"

#: Head daemons, by a piece of their command line (first match wins).
HEAD_DAEMONS = (
    ("gcs_server", "Ray head: GCS"),
    ("/raylet ", "Ray head: raylet"),
    ("dashboard/dashboard.py", "Ray head: dashboard"),
    ("ray-dashboard-", "Ray head: dashboard modules"),
    ("ray.dashboard.subprocesses.module", "Ray head: dashboard modules"),  # their forkserver's preloads
    ("dashboard/agent.py", "Ray head: dashboard agent"),
    ("ray::DashboardA", "Ray head: dashboard agent"),
    ("runtime_env/agent/main.py", "Ray head: runtime env agent"),
    ("ray::RuntimeEnv", "Ray head: runtime env agent"),
    ("log_monitor.py", "Ray head: log monitor"),
    ("autoscaler/_private/monitor.py", "Ray head: autoscaler monitor"),
    ("ray.util.client.server", "Ray head: Ray Client server"),
    ("from ray.scripts.scripts import main", "Ray head: `ray start` process"),
)


#: pytest-xdist workers' titles (a fork of a worker keeps its parent's title).
PYTEST_TITLES = ("[pytest-xdist", "pytest ")
#: execnet's bootstrap of an xdist worker, its command line until the worker retitles itself.
EXECNET_BOOTSTRAP = "exec(eval(sys.stdin.readline()))"


@dataclass(frozen=True)
class Exited:
    """One process accounting record."""

    pid: int
    ppid: int
    started: int  # epoch seconds
    cpu_s: float  # user + system, all threads
    comm: str  # the kernel's name of the process's last thread


def comp_t(value: int) -> int:
    """Decode a ``comp_t``: 13-bit mantissa, 3-bit base-8 exponent."""
    return (value & 0x1FFF) << (3 * ((value >> 13) & 7))


def read_pacct(data: bytes) -> Iterator[Exited]:
    """The records of an ``acct`` v3 file."""
    for offset in range(0, len(data) - ACCT_V3.size + 1, ACCT_V3.size):
        fields = ACCT_V3.unpack_from(data, offset)
        if fields[1] & 0x0F != 3:  # not a v3 record
            continue
        pid, ppid, started, utime, stime = fields[6], fields[7], fields[8], fields[10], fields[11]
        comm = fields[-1].split(b"\0")[0].decode(errors="replace")
        yield Exited(pid, ppid, started, (comp_t(utime) + comp_t(stime)) / TICKS, comm)


def read_procs(lines: Iterable[str], boot_time: int) -> dict[int, list[tuple[float, str]]]:
    """The sampler's lines (``pid<TAB>start ticks<TAB>command line``) as pid -> [(start epoch, line)].

    A ``# btime N`` line (the sampler's first) gives the boot time the start ticks count from: the
    kernel's figure drifts with the clock (by 29 s in two hours on this VM), so a past run's file is read
    with its own. A line of neither form continues the command line before it (a ``-c`` program's newlines).
    """
    seen: dict[int, list[tuple[float, str]]] = defaultdict(list)
    last: int | None = None
    for line in lines:
        if line.startswith(BOOT_TIME_HEADER):
            boot_time = int(line[len(BOOT_TIME_HEADER) :])
            continue
        parts = line.rstrip("\n").split("\t", 2)
        if len(parts) == 3 and parts[0].isdigit() and parts[1].isdigit():
            last = int(parts[0])
            seen[last].append((boot_time + int(parts[1]) / TICKS, parts[2]))
        elif last is not None:
            start, command = seen[last][-1]
            seen[last][-1] = (start, f"{command} {line.strip()}")
    return seen


def command_lines(procs: dict[int, list[tuple[float, str]]], record: Exited) -> list[str]:
    """The command lines the sampler saw for this record's process (same pid, started within 2 s)."""
    return [line for start, line in procs.get(record.pid, ()) if abs(start - record.started) <= 2]


def worker_title(lines: list[str], comm: str) -> str | None:
    """A Ray worker's most telling title (``ray::JobSupervisor``), or ``None`` if it is not a worker."""
    titles = [line.split(" ")[0] for line in lines if line.startswith("ray::")]
    if not titles and not any("default_worker.py" in line for line in lines):
        return comm if not lines and comm.startswith("ray::") else None  # unseen: judged by its comm
    named = [title for title in titles if title != "ray::IDLE"] or titles
    if named:
        return named[0]
    return comm if comm.startswith("ray::") else "ray::(untitled)"


def kind_of(lines: list[str], comm: str) -> str:
    """The kind of one process, from its command lines (or, unseen, its ``comm``)."""
    text = " ".join(lines) or comm
    for needle, kind in HEAD_DAEMONS:
        if needle in text:
            return kind
    title = worker_title(lines, comm)
    if title is not None:
        return (
            "Ray worker: job supervisor"
            if title.startswith("ray::JobSupervi")
            else "Ray worker: tasks and actors"
        )
    if not lines:
        return f"unseen (comm {comm})"
    if any(
        line.startswith(PYTEST_TITLES) or " -m pytest " in line or EXECNET_BOOTSTRAP in line for line in lines
    ):
        return "pytest (main, xdist workers and their forks)"
    if "airflow_ray_provider.workloads" in text:
        return "workload driver or CLI"
    if "airflow_ray_provider" in text:
        return "provider CLI and helpers"
    if "airflow" in text:
        return "Airflow services and CLI"
    if "chrom" in text:
        return "Chromium"
    return "other"


def summarise(records: list[Exited], procs: dict[int, list[tuple[float, str]]]) -> dict[str, object]:
    """CPU by kind; a process whose ancestor is a Ray worker (a job's entrypoint) is a job driver."""
    by_pid: dict[int, list[int]] = defaultdict(list)
    for index, record in enumerate(records):
        by_pid[record.pid].append(index)
    kinds = [kind_of(command_lines(procs, r), r.comm) for r in records]

    def parent(index: int) -> int | None:
        child = records[index]
        older = [i for i in by_pid.get(child.ppid, ()) if records[i].started <= child.started]
        return max(older, key=lambda i: records[i].started) if older else None

    totals: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    titles: dict[str, list[float]] = defaultdict(lambda: [0, 0.0])
    for index, record in enumerate(records):
        kind, up = kinds[index], parent(index)
        for _ in range(6):  # a job's entrypoint runs under `sh -c` under its supervisor
            if up is None or kinds[up].startswith("Ray worker"):
                break
            up = parent(up)
        under_a_worker = up is not None and kinds[up].startswith("Ray worker")
        if under_a_worker and not kind.startswith(("Ray ", "pytest")):
            kind = "job drivers (entrypoints under a job supervisor)"
        totals[kind][0] += 1
        totals[kind][1] += record.cpu_s
        if kind.startswith("Ray worker"):
            title = worker_title(command_lines(procs, record), record.comm) or "?"
            titles[title][0] += 1
            titles[title][1] += record.cpu_s
    total = sum(cpu for _, cpu in totals.values())

    def rows(table: dict[str, list[float]]) -> list[dict[str, object]]:
        return [
            {
                "kind": k,
                "processes": int(n),
                "cpu_s": round(c, 1),
                "share": round(c / total, 3) if total else 0.0,
            }
            for k, (n, c) in sorted(table.items(), key=lambda item: -item[1][1])
        ]

    return {
        "cpu_s": round(total, 1),
        "processes": len(records),
        "kinds": rows(totals),
        "worker_titles": rows(titles),
    }


def sample(path: Path, stop: threading.Event) -> None:
    """Append each process's command line, and each new title a process takes, to ``path``."""
    seen: set[tuple[str, str, str]] = set()
    with path.open("a", buffering=1) as out:
        out.write(f"{BOOT_TIME_HEADER}{boot_time()}\n")
        while not stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    stat = Path(f"/proc/{pid}/stat").read_text()
                    start = stat.rsplit(")", 1)[1].split()[19]
                    line = Path(f"/proc/{pid}/cmdline").read_bytes()[:300]
                except (OSError, IndexError):
                    continue
                command = " ".join(line.decode(errors="replace").replace("\0", " ").split())
                key = (pid, start, command)
                if key not in seen:
                    seen.add(key)
                    out.write("\t".join(key) + "\n")
            stop.wait(SAMPLE_GAP_S)


def boot_time() -> int:
    """The machine's boot time (epoch seconds), from ``/proc/stat``."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith("btime "):
            return int(line.split()[1])
    raise RuntimeError("/proc/stat has no btime line")


def run(command: list[str], folder: Path) -> tuple[Path, Path, int, int, int]:
    """Run ``command`` with process accounting on; returns (pacct, procs, start, end, exit code)."""
    pacct, procs = folder / "run.pacct", folder / "run.procs"
    pacct.touch()
    subprocess.run(["accton", str(pacct)], check=True, stdout=subprocess.DEVNULL)
    stop = threading.Event()
    sampler = threading.Thread(target=sample, args=(procs, stop), daemon=True)
    sampler.start()
    start = int(time.time())
    try:
        code = subprocess.call(command)
    finally:
        time.sleep(1)  # the last exits reach the file
        subprocess.run(["accton", "off"], check=False, stdout=subprocess.DEVNULL)
        stop.set()
        sampler.join()
    return pacct, procs, start, int(time.time()) + 1, code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pacct", type=Path, help="read this accounting file instead of running a command")
    parser.add_argument("--procs", type=Path, help="the sampler's file of that run")
    parser.add_argument("--since", type=int, default=0, help="count processes started at or after (epoch s)")
    parser.add_argument("--until", type=int, default=1 << 62, help="... and at or before (epoch s)")
    parser.add_argument(
        "--boot-time", type=int, help="for a --procs file without its '# btime' line: /proc/stat's btime then"
    )
    parser.add_argument("command", nargs="*", help="the command to run, after --")
    args = parser.parse_args(argv)
    code = 0
    with tempfile.TemporaryDirectory(prefix="suite-cpu-") as tmp:
        if args.pacct is None:
            if not args.command:
                parser.error("give a command after --, or --pacct and --procs")
            pacct, procs, args.since, args.until, code = run(args.command, Path(tmp))
        else:
            if args.procs is None:
                parser.error("--pacct needs --procs")
            pacct, procs = args.pacct, args.procs
        records = [r for r in read_pacct(pacct.read_bytes()) if args.since <= r.started <= args.until]
        seen = read_procs(procs.read_text(errors="replace").splitlines(), args.boot_time or boot_time())
    summary = summarise(records, seen)
    summary.update(since=args.since, until=args.until, command=args.command)
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(summary, indent=1))
    print(
        f"{summary['cpu_s']:,} CPU-s in {summary['processes']:,} processes that started and ended in the run"
    )
    for title, table in (("by kind", "kinds"), ("Ray workers by title", "worker_titles")):
        print(f"\n{title}:")
        for row in summary[table][:25]:  # type: ignore[index]
            print(f"{row['cpu_s']:9,.1f} s {row['share']:6.1%} {row['processes']:6,} x  {row['kind']}")
    return code


if __name__ == "__main__":
    sys.exit(main())
