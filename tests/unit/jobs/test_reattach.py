"""The re-attach rule: never two live jobs for one task instance."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayJobAlreadyExistsError
from airflow_ray_provider.jobs import JobState, JobStatus
from airflow_ray_provider.jobs.submission import Choice, decide, submit_or_attach

pytestmark = pytest.mark.unit
BASE = "airflow-d-t-run-0123456789"


def job(sid, status):
    return JobState(submission_id=sid, status=JobStatus(status))


@pytest.mark.parametrize(
    ("jobs", "action", "sid"),
    [
        ([], Choice.SUBMIT, BASE),
        ([job("unrelated", "RUNNING")], Choice.SUBMIT, BASE),
        ([job(BASE, "PENDING")], Choice.ATTACH, BASE),
        ([job(BASE, "RUNNING")], Choice.ATTACH, BASE),
        ([job(BASE, "SUCCEEDED")], Choice.DONE, BASE),
        ([job(BASE, "FAILED")], Choice.SUBMIT, BASE + "-a2"),
        ([job(BASE, "STOPPED")], Choice.SUBMIT, BASE + "-a2"),
        ([job(BASE + "-a2", "RUNNING"), job(BASE, "FAILED")], Choice.ATTACH, BASE + "-a2"),
        ([job(BASE, "FAILED"), job(BASE + "-a2", "STOPPED")], Choice.SUBMIT, BASE + "-a3"),
        (
            [job(BASE, "FAILED"), job(BASE + "-a10", "SUCCEEDED"), job(BASE + "-a9", "FAILED")],
            Choice.DONE,
            BASE + "-a10",
        ),
    ],
)
def test_decide(jobs, action, sid):
    decision = decide(BASE, jobs)
    assert (decision.choice, decision.submission_id) == (action, sid)


def test_lost_race_re_plans_and_attaches():
    cluster: list[JobState] = []
    submitted: list[str] = []

    def submit(sid):
        # Another worker submitted the same id a moment earlier.
        cluster.append(job(sid, "RUNNING"))
        raise RayJobAlreadyExistsError("exists", http_status=500, url="u")

    decision = submit_or_attach(BASE, lambda: list(cluster), submit)
    assert decision.choice is Choice.ATTACH and decision.submission_id == BASE and submitted == []


def test_submit_happens_once():
    calls: list[str] = []
    decision = submit_or_attach(BASE, list, lambda sid: calls.append(sid) or sid)
    assert decision.choice is Choice.SUBMIT and calls == [BASE]


def test_endless_races_give_up():
    def submit(sid):
        raise RayJobAlreadyExistsError("exists", http_status=500, url="u")

    with pytest.raises(RayJobAlreadyExistsError, match="races"):
        submit_or_attach(BASE, list, submit, races=2)
