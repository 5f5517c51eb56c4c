"""Re-attach, never duplicate: decide what a (re)started task instance does with its Ray jobs.

**The rule.** A task instance owns the submission ids ``<base>``, ``<base>-a2``, ``<base>-a3``, ...
(:mod:`.submission`). When it starts, for any try, it looks at the latest of them on the cluster:

======================  ==========================================================
latest job              action
======================  ==========================================================
none                    submit ``<base>``
PENDING / RUNNING       wait on it (re-attach); submit nothing
SUCCEEDED               succeed with it; submit nothing
FAILED / STOPPED        submit the next attempt, ``<base>-a<n+1>``
======================  ==========================================================

Ray refuses a second job with an existing submission id, so two workers racing on one task instance
(a zombie and its replacement) cannot both submit: the loser gets "already exists", plans again and
re-attaches. A new attempt is only ever submitted once every earlier one is terminal, so a task
instance never has two live jobs.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

from airflow_ray_provider.exceptions import RayJobAlreadyExistsError
from airflow_ray_provider.jobs.status import JobState
from airflow_ray_provider.jobs.submission import attempt_of, attempt_submission_id


class Choice(str, enum.Enum):
    """What a (re)started task instance does with its job."""

    SUBMIT = "submit"
    ATTACH = "attach"
    DONE = "done"


@dataclass(frozen=True)
class Decision:
    """The decision for one task instance.

    :param choice: submit a new job, attach to a live one, or finish with a succeeded one.
    :param submission_id: the id to submit under, or of the job to attach to / finish with.
    :param state: the existing job's state (``None`` for ``SUBMIT``).
    """

    choice: Choice
    submission_id: str
    state: JobState | None = None


def decide(base: str, jobs: list[JobState]) -> Decision:
    """Apply the rule to the jobs of the cluster (any jobs: those not under ``base`` are ignored)."""
    attempts = [(n, job) for job in jobs if (n := attempt_of(base, job.submission_id)) is not None]
    if not attempts:
        return Decision(Choice.SUBMIT, base)
    number, latest = max(attempts, key=lambda item: item[0])
    if not latest.is_terminal:
        return Decision(Choice.ATTACH, latest.submission_id, latest)
    if latest.is_success:
        return Decision(Choice.DONE, latest.submission_id, latest)
    return Decision(Choice.SUBMIT, attempt_submission_id(base, number + 1))


def submit_or_attach(
    base: str,
    list_jobs: Callable[[], list[JobState]],
    submit: Callable[[str], str],
    *,
    races: int = 3,
) -> Decision:
    """Decide, and submit when the decision says so; on an "already exists" race, decide again.

    :param base: the task instance's base submission id.
    :param list_jobs: returns the cluster's jobs.
    :param submit: submits under the given id and returns it.
    :param races: how many lost races to tolerate before giving up.
    :returns: the decision carried out (``SUBMIT`` means a job was just submitted).
    """
    for _ in range(races):
        decision = decide(base, list_jobs())
        if decision.choice is not Choice.SUBMIT:
            return decision
        try:
            submit(decision.submission_id)
        except RayJobAlreadyExistsError:
            continue
        return decision
    raise RayJobAlreadyExistsError(
        f"lost {races} submission races for {base!r}; another process keeps submitting its jobs",
        http_status=500,
        url="",
    )
