"""The "Ray job" extra link of the job operators: where it points and when it is empty.

Airflow 3 stores an operator's extra links as XComs when the task ends (the task runner asks each link
for its URL), and the UI reads them back by key. The job operators push the URL when they submit; the
link answers with it, or with ``""`` for a task that never submitted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator, BaseOperatorLink

if TYPE_CHECKING:
    from airflow.sdk.types import TaskInstanceKey

JOB_URL_XCOM_KEY = "ray_job_url"


class RayJobLink(BaseOperatorLink):
    """Extra link: the job's page in the Ray dashboard, at the address a browser reaches.

    The task runner asks every task for its links when it ends and stores the answer as this XCom: a
    task that submitted (or resumed after its trigger) answers with its job's URL, one that failed
    before submitting answers ``""`` without looking the XCom up (a missing XCom logs an error).
    """

    name = "Ray job"

    @property
    def xcom_key(self) -> str:
        """XCom key the operator stores the job URL under."""
        return JOB_URL_XCOM_KEY

    def get_link(self, operator: BaseOperator, *, ti_key: TaskInstanceKey) -> str:
        """Return the job URL of this task, or an empty string before submission."""
        url = getattr(operator, LINK_ATTRIBUTE, None)
        if url is not None:
            return str(url)
        if not getattr(operator, RESUMED_ATTRIBUTE, False):
            return ""  # nothing submitted in this process, nor in the one that deferred
        from airflow.sdk.execution_time.xcom import XCom

        return XCom.get_value(ti_key=ti_key, key=JOB_URL_XCOM_KEY) or ""


#: Operator attributes :class:`RayJobLink` reads: the URL pushed in this process, and whether this
#: process resumed a deferred task (whose first process pushed the URL).
LINK_ATTRIBUTE = "_ray_job_url"
RESUMED_ATTRIBUTE = "_resumed_from_trigger"


def push_job_url(operator: BaseOperator, ti: Any, url: str) -> None:
    """Push the job's link XCom and remember it for :class:`RayJobLink` in this process."""
    setattr(operator, LINK_ATTRIBUTE, url)
    ti.xcom_push(key=JOB_URL_XCOM_KEY, value=url)
