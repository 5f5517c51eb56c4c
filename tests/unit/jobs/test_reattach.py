"""The re-attach rule: never two live jobs for one task instance."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayJobAlreadyExistsError
from airflow_ray_provider.jobs.reattach import Action, decide, submit_or_attach
from airflow_ray_provider.jobs.status import JobState, JobStatus

pytestmark = pytest.mark.unit
BASE = "airflow-d-t-run-0123456789"


def job(sid, status):
    return JobState(submission_id=sid, status=JobStatus(status))


@pytest.mark.parametrize(
    ("jobs", "action", "sid"),
    [
        ([], Action.SUBMIT, BASE),
        ([job("unrelated", "RUNNING")], Action.SUBMIT, BASE),
        ([job(BASE, "PENDING")], Action.ATTACH, BASE),
        ([job(BASE, "RUNNING")], Action.ATTACH, BASE),
        ([job(BASE, "SUCCEEDED")], Action.DONE, BASE),
        ([job(BASE, "FAILED")], Action.SUBMIT, BASE + "-a2"),
        ([job(BASE, "STOPPED")], Action.SUBMIT, BASE + "-a2"),
        ([job(BASE + "-a2", "RUNNING"), job(BASE, "FAILED")], Action.ATTACH, BASE + "-a2"),
        ([job(BASE, "FAILED"), job(BASE + "-a2", "STOPPED")], Action.SUBMIT, BASE + "-a3"),
        (
            [job(BASE, "FAILED"), job(BASE + "-a10", "SUCCEEDED"), job(BASE + "-a9", "FAILED")],
            Action.DONE,
            BASE + "-a10",
        ),
    ],
)
def test_decide(jobs, action, sid):
    plan = decide(BASE, jobs)
    assert (plan.action, plan.submission_id) == (action, sid)


def test_lost_race_re_plans_and_attaches():
    cluster: list[JobState] = []
    submitted: list[str] = []

    def submit(sid):
        # Another worker submitted the same id a moment earlier.
        cluster.append(job(sid, "RUNNING"))
        raise RayJobAlreadyExistsError("exists", http_status=500, url="u")

    plan = submit_or_attach(BASE, lambda: list(cluster), submit)
    assert plan.action is Action.ATTACH and plan.submission_id == BASE and submitted == []


def test_submit_happens_once():
    calls: list[str] = []
    plan = submit_or_attach(BASE, list, lambda sid: calls.append(sid) or sid)
    assert plan.action is Action.SUBMIT and calls == [BASE]


def test_endless_races_give_up():
    def submit(sid):
        raise RayJobAlreadyExistsError("exists", http_status=500, url="u")

    with pytest.raises(RayJobAlreadyExistsError, match="races"):
        submit_or_attach(BASE, list, submit, races=2)
