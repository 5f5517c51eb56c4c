"""The one cleanup table, and the one word every operator takes."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch.run import Cleanup, CleanupActions, Ending, actions_for

pytestmark = pytest.mark.unit

KEEP, DELETE_ONLY, BOTH = (
    CleanupActions(False, False),
    CleanupActions(False, True),
    CleanupActions(True, True),
)

#: The table of docs/launch.md, row by row.
TABLE = {
    Ending.SUCCEEDED: {Cleanup.NEVER: KEEP, Cleanup.ON_EXCEPTION: DELETE_ONLY, Cleanup.ALWAYS: DELETE_ONLY},
    Ending.FAILED: {Cleanup.NEVER: KEEP, Cleanup.ON_EXCEPTION: DELETE_ONLY, Cleanup.ALWAYS: DELETE_ONLY},
    Ending.TIMED_OUT: {Cleanup.NEVER: KEEP, Cleanup.ON_EXCEPTION: BOTH, Cleanup.ALWAYS: BOTH},
    Ending.USER_KILL: {Cleanup.NEVER: KEEP, Cleanup.ON_EXCEPTION: BOTH, Cleanup.ALWAYS: BOTH},
    Ending.WORKER_SIGTERM: {Cleanup.NEVER: KEEP, Cleanup.ON_EXCEPTION: KEEP, Cleanup.ALWAYS: BOTH},
}


@pytest.mark.parametrize("ending", list(Ending))
@pytest.mark.parametrize("cleanup", list(Cleanup))
def test_every_cell_of_the_table(cleanup, ending):
    assert actions_for(cleanup, ending) == TABLE[ending][cleanup]


def test_the_docs_table_is_this_table():
    from pathlib import Path

    text = (Path(__file__).parents[3] / "docs" / "launch.md").read_text()
    for ending in Ending:
        assert f"| {ending.value} |" in text, ending


def test_a_bad_word_is_rejected_naming_the_field():
    with pytest.raises(
        RayInvalidInputError, match="cleanup must be one of 'never', 'on_exception', 'always'"
    ):
        Cleanup("sometimes")


@pytest.mark.parametrize("old", [{"stop_on_kill": True}, {"on_kill": "none"}])
def test_no_operator_takes_the_names_cleanup_replaced(old):
    from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    with pytest.raises(TypeError, match=next(iter(old))):
        SubmitRayJobOperator(task_id="t", entrypoint="x", **old)
    with pytest.raises(TypeError, match=next(iter(old))):
        KubeRayJobOperator(task_id="t", entrypoint="x", cluster_conn_id="k", **old)


def test_operators_take_the_one_word():
    from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
    from airflow_ray_provider.operators.ray_job import EphemeralRayJobOperator, SubmitRayJobOperator

    def submit(**kw):
        return SubmitRayJobOperator(task_id="t", entrypoint="x", **kw).cleanup

    assert submit() is Cleanup.ON_EXCEPTION and submit(cleanup="always") is Cleanup.ALWAYS
    assert EphemeralRayJobOperator(task_id="t", entrypoint="x").cleanup is Cleanup.ALWAYS

    def rayjob(**kw):
        return KubeRayJobOperator(task_id="t", entrypoint="x", cluster_conn_id="k", **kw)

    assert rayjob().cleanup is Cleanup.ALWAYS and rayjob(cleanup="never").cleanup is Cleanup.NEVER
    assert rayjob(suspend_on_kill=True).suspend_on_kill is True
    with pytest.raises(RayInvalidInputError, match="cleanup must be one of"):
        submit(cleanup="soon")
