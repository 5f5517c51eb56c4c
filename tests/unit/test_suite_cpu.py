"""benchmarks/suite_cpu.py: records read right, processes named by kind, drivers found by ancestry."""

from __future__ import annotations

import pytest

from benchmarks import suite_cpu
from benchmarks.suite_cpu import ACCT_V3, Exited, comp_t, kind_of, read_pacct, read_procs, summarise

pytestmark = pytest.mark.unit


def _record(
    pid: int, ppid: int, started: int, utime: int, stime: int, comm: bytes, version: int = 3
) -> bytes:
    return ACCT_V3.pack(0, version, 0, 0, 0, 0, pid, ppid, started, 1.0, utime, stime, 0, 0, 0, 0, 0, 0, comm)


def test_comp_t_decodes_mantissa_and_base_8_exponent():
    assert comp_t(100) == 100
    assert comp_t((1 << 13) | 5) == 40  # 5 x 8
    assert comp_t((2 << 13) | 3) == 192  # 3 x 64


def test_v3_records_are_read_and_other_versions_skipped(monkeypatch):
    monkeypatch.setattr(suite_cpu, "TICKS", 100)
    data = _record(7, 1, 1_000, 250, 50, b"python") + _record(8, 1, 1_001, 1, 1, b"old", version=2)
    assert list(read_pacct(data)) == [Exited(pid=7, ppid=1, started=1_000, cpu_s=3.0, comm="python")]


def test_sampler_lines_keep_every_title_of_a_pid_and_join_a_programs_newlines(monkeypatch):
    monkeypatch.setattr(suite_cpu, "TICKS", 100)
    lines = [
        "9\t500\tpython default_worker.py",
        "9\t500\tray::JobSupervisor",
        "4\t300\tpython -u -c import sys",  # a `-c` program with a newline (files of older samplers)
        "from ray.scripts.scripts import main",
    ]
    assert read_procs(lines, boot_time=1_000) == {
        9: [(1_005.0, "python default_worker.py"), (1_005.0, "ray::JobSupervisor")],
        4: [(1_003.0, "python -u -c import sys from ray.scripts.scripts import main")],
    }
    assert kind_of([read_procs(lines, 1_000)[4][0][1]], "python") == "Ray head: `ray start` process"


def test_a_files_own_boot_time_wins_over_todays(monkeypatch):
    monkeypatch.setattr(suite_cpu, "TICKS", 100)
    assert read_procs(["# btime 2000", "9\t500\tray::IDLE"], boot_time=1_000) == {9: [(2_005.0, "ray::IDLE")]}


@pytest.mark.parametrize(
    ("lines", "comm", "kind"),
    [
        (["/v/bin/python /v/ray/dashboard/dashboard.py --host=x"], "python", "Ray head: dashboard"),
        (["/v/ray/core/src/ray/gcs/gcs_server --log_dir=/t"], "gcs_server", "Ray head: GCS"),
        ([], "ray::DashboardA", "Ray head: dashboard agent"),  # unseen: named by its comm
        (["python default_worker.py", "ray::IDLE", "ray::JobSupervisor"], "x", "Ray worker: job supervisor"),
        (["python default_worker.py", "ray::IDLE"], "x", "Ray worker: tasks and actors"),
        ([], "ray::JobSupervi", "Ray worker: job supervisor"),  # comm is cut at 15 characters
        (
            ["[pytest-xdist running] tests/unit/test_x.py::test_y"],
            "python",
            "pytest (main, xdist workers and their forks)",
        ),
        # a path under /tmp/pytest-of-root does not make a workload's CLI a pytest process
        (
            ["python -m airflow_ray_provider.workloads.evaluate --config /tmp/pytest-of-root/c.json"],
            "python",
            "workload driver or CLI",
        ),
        (["airflow scheduler"], "airflow", "Airflow services and CLI"),
        # a forkserver is the dashboard's only by what it preloads (Airflow starts one too)
        (
            [
                "python -c from multiprocessing.forkserver import main; "
                "main(1, 2, ['ray', 'ray.dashboard.subprocesses.module'"
            ],
            "python",
            "Ray head: dashboard modules",
        ),
        (
            ["python -c from multiprocessing.forkserver import main; main(1, 2, ['airflow'"],
            "python",
            "Airflow services and CLI",
        ),
        ([], "python", "unseen (comm python)"),
    ],
)
def test_processes_are_named_by_kind(lines, comm, kind):
    assert kind_of(lines, comm) == kind


def test_a_job_entrypoint_is_a_driver_through_its_shell_and_cpu_sums_by_kind(monkeypatch):
    monkeypatch.setattr(suite_cpu, "TICKS", 1)
    records = [
        Exited(10, 1, 100, 2.0, "ray::JobSupervi"),  # the supervisor
        Exited(11, 10, 101, 0.1, "sh"),  # `sh -c <entrypoint>`
        Exited(12, 11, 101, 1.5, "python"),  # the entrypoint
        Exited(13, 1, 99, 4.0, "python"),  # a workload CLI the test started itself (no supervisor above)
    ]
    procs = {
        10: [(100.0, "python default_worker.py"), (100.0, "ray::JobSupervisor")],
        11: [(101.0, "/bin/sh -c python -m airflow_ray_provider.workloads.evaluate")],
        12: [(101.0, "python -m airflow_ray_provider.workloads.evaluate")],
        13: [(99.0, "python -m airflow_ray_provider.workloads.zone_training")],
    }
    summary = summarise(records, procs)
    kinds = {row["kind"]: (row["processes"], row["cpu_s"]) for row in summary["kinds"]}  # type: ignore[union-attr]
    assert kinds == {
        "Ray worker: job supervisor": (1, 2.0),
        "job drivers (entrypoints under a job supervisor)": (2, 1.6),
        "workload driver or CLI": (1, 4.0),
    }
    assert summary["cpu_s"] == 7.6
    assert summary["worker_titles"] == [
        {"kind": "ray::JobSupervisor", "processes": 1, "cpu_s": 2.0, "share": 0.263}
    ]
