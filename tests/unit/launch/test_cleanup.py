"""The one cleanup table, and the deprecated names that map onto it."""

from __future__ import annotations

import pytest

from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.launch import (
    Cleanup,
    CleanupActions,
    Ending,
    actions_for,
    from_on_kill,
    from_stop_on_kill,
    resolve_cleanup,
)

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


@pytest.mark.parametrize(
    ("old", "new"), [(None, Cleanup.ON_EXCEPTION), (True, Cleanup.ALWAYS), (False, Cleanup.NEVER)]
)
def test_stop_on_kill_maps_with_a_deprecation_warning(old, new):
    with pytest.warns(DeprecationWarning, match="stop_on_kill"):
        assert from_stop_on_kill(old) is new


@pytest.mark.parametrize(("old", "new"), [("delete", Cleanup.ALWAYS), ("none", Cleanup.NEVER)])
def test_on_kill_maps_with_a_deprecation_warning(old, new):
    with pytest.warns(DeprecationWarning, match="on_kill"):
        assert from_on_kill(old) is new


def test_bad_words_and_both_names_are_rejected_naming_the_field():
    with pytest.raises(
        RayInvalidInputError, match="cleanup must be one of 'never', 'on_exception', 'always'"
    ):
        Cleanup.parse("sometimes")
    with pytest.raises(RayInvalidInputError, match="pass cleanup or the deprecated stop_on_kill"):
        resolve_cleanup("always", Cleanup.NEVER, default=Cleanup.ALWAYS, legacy_name="stop_on_kill")
    assert resolve_cleanup(None, None, default=Cleanup.ALWAYS, legacy_name="x") is Cleanup.ALWAYS


def test_operators_take_the_new_word_and_the_old_names():
    from airflow_ray_provider.operators.ephemeral_job import EphemeralRayJobOperator
    from airflow_ray_provider.operators.kuberay_job import KubeRayJobOperator
    from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator

    def submit(**kw):
        return SubmitRayJobOperator(task_id="t", entrypoint="x", **kw).cleanup

    assert submit() is Cleanup.ON_EXCEPTION and submit(cleanup="always") is Cleanup.ALWAYS
    with pytest.warns(DeprecationWarning):
        assert submit(stop_on_kill=False) is Cleanup.NEVER
    assert EphemeralRayJobOperator(task_id="t", entrypoint="x").cleanup is Cleanup.ALWAYS

    def rayjob(**kw):
        return KubeRayJobOperator(task_id="t", entrypoint="x", cluster_conn_id="k", **kw)

    assert rayjob().cleanup is Cleanup.ALWAYS and rayjob(cleanup="never").cleanup is Cleanup.NEVER
    with pytest.warns(DeprecationWarning):
        assert rayjob(on_kill="none").cleanup is Cleanup.NEVER
    assert rayjob(on_kill="suspend").on_kill_action == "suspend"
    with pytest.raises(RayInvalidInputError, match="cleanup must be one of"):
        submit(cleanup="soon")
