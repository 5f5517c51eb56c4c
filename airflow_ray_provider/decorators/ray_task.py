"""``@task.ray``: run a Python function as a Ray job and return its value as the task's XCom.

Built on :class:`~airflow_ray_provider.operators.ray_job.SubmitRayJobOperator` (``cluster=`` or
``ray_conn_id=``) and :class:`~airflow_ray_provider.operators.ephemeral_job.EphemeralRayJobOperator`
(``cluster_spec=`` / ``cluster_conn_id=``: cluster and job in one task), so submission ids, re-attach,
waiting, deferral, timeouts, log streaming and cleanup are the run's. This module adds what a function
needs: the call is cloudpickled into a package that Ray's Job API uploads (:mod:`.payload`), a driver
runs it inside the job with Ray initialised, and :meth:`~_RayTaskBase.result` reads the framed outcome
back from the job's log (:mod:`.outcome`): a retried task that finds its job succeeded returns the same
value without running the function again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, cast

from airflow.sdk.bases.decorator import DecoratedOperator, TaskDecorator, task_decorator_factory

from airflow_ray_provider.decorators.checks import (
    call_arguments,
    check_decorator_arguments,
    check_function,
    check_result_uri,
    is_one_task,
)
from airflow_ray_provider.decorators.outcome import task_error, task_value
from airflow_ray_provider.decorators.payload import (
    PACKAGE_NAME,
    StagedPackage,
    dumps_call,
    function_name,
    stage_package,
)
from airflow_ray_provider.exceptions import RayJobFailedError
from airflow_ray_provider.operators.ephemeral_job import EphemeralRayJobOperator
from airflow_ray_provider.operators.ray_job import SubmitRayJobOperator
from airflow_ray_provider.workloads.function import KIND_ERROR, last_message

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_ray_provider.launch import JobRun


class _RayTaskBase(DecoratedOperator):
    """What both ``@task.ray`` operators add to their job operator: the call's package and its value.

    :param result_uri: a ``pyarrow.fs`` folder (local path, ``s3://``, ``gs://``) for return values
        that are not JSON or whose JSON is over 1 MiB; reachable by the cluster and the Airflow worker.
    :param python: the interpreter of the job's driver on the cluster (Python and Ray's cloudpickle must
        match the Airflow worker's).
    """

    custom_operator_name = "@task.ray"
    usage_mode: ClassVar[str | None] = "task_ray"

    def __init__(
        self,
        *,
        python_callable: Callable[..., Any],
        op_args: Collection[Any] | None = None,
        op_kwargs: Mapping[str, Any] | None = None,
        result_uri: str | None = None,
        python: str = "python",
        **kwargs: Any,
    ) -> None:
        check_function(python_callable)
        check_decorator_arguments({**kwargs, "result_uri": result_uri})
        self.result_uri = result_uri
        self.python = python
        self._staged: StagedPackage | None = None
        super().__init__(
            python_callable=python_callable,
            op_args=op_args,
            op_kwargs=op_kwargs,
            entrypoint=[python, "-m", PACKAGE_NAME],
            **kwargs,
        )

    def execute(self, context: Context) -> Any:
        """Run the function as this task's Ray job (or re-attach to it) and return its value."""
        try:
            return super().execute(context)
        finally:
            self._remove_staged()  # a failure before the submission

    def job_submitted(self, submission_id: str) -> None:
        """The package is uploaded (or was never needed: re-attached): its folder goes now."""
        self._remove_staged()

    def _remove_staged(self) -> None:
        if self._staged is not None:
            self._staged.remove()
            self._staged = None

    def job(self, context: Context) -> Any:
        """The job operator's job, plus the call's package as a ``py_modules`` entry (uploaded by Ray)."""
        spec = super().job(context)  # type: ignore[misc]  # the job operator's, next in the MRO
        staged = self._stage(context)
        runtime_env = dict(spec.runtime_env)
        runtime_env["py_modules"] = [*runtime_env.get("py_modules", []), str(staged.path)]
        return dataclasses.replace(spec, runtime_env=runtime_env)

    def _stage(self, context: Context) -> StagedPackage:
        if self._staged is None:
            result_uri = check_result_uri(self.result_uri)
            args, kwargs = call_arguments(self.python_callable, self.op_args, self.op_kwargs, context)
            roots = [os.path.dirname(self.dag.fileloc)] if self.has_dag() and self.dag.fileloc else []
            data = dumps_call(self.python_callable, args, kwargs, local_roots=roots)
            name = function_name(self.python_callable)
            self._staged = stage_package(data, function=name, result_uri=result_uri)
            self.log.info("Pickled %s and its arguments: %d bytes", name, len(data))
        return self._staged

    def result(self, run: JobRun) -> Any:
        """The function's value from the finished job; its remote error when it raised."""
        sid = run.submission_id or ""
        try:
            super().result(run)  # type: ignore[misc]  # raises for a failed or stopped job
        except RayJobFailedError as exc:
            message = last_message(run.logs())
            if message is not None and message.kind == KIND_ERROR:
                raise task_error(message, sid, log_tail=exc.log_tail) from exc
            raise
        value = task_value(last_message(run.logs()), sid)
        self.log.info("@task.ray %s returned a %s", function_name(self.python_callable), type(value).__name__)
        return value


_TEMPLATE_FIELDS = (*DecoratedOperator.template_fields, "result_uri")


class RayTaskOperator(_RayTaskBase, SubmitRayJobOperator):
    """``@task.ray(cluster=... | ray_conn_id=...)``: the function as a job on an existing cluster."""

    template_fields = (*_TEMPLATE_FIELDS, *SubmitRayJobOperator.template_fields)  # type: ignore[assignment]
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **SubmitRayJobOperator.template_fields_renderers,
    }


class OneTaskRayTaskOperator(_RayTaskBase, EphemeralRayJobOperator):
    """``@task.ray(cluster_spec=... | cluster_conn_id=...)``: a cluster of its own, deleted in the task."""

    template_fields = (*_TEMPLATE_FIELDS, *EphemeralRayJobOperator.template_fields)  # type: ignore[assignment]
    template_fields_renderers: ClassVar[dict[str, str]] = {
        **DecoratedOperator.template_fields_renderers,
        **EphemeralRayJobOperator.template_fields_renderers,
    }


def ray_task(
    python_callable: Callable[..., Any] | None = None,
    multiple_outputs: bool | None = None,
    **kwargs: Any,
) -> TaskDecorator:
    """Run the decorated function as a Ray job; its return value is the task's XCom.

    Where: ``cluster=`` (a cluster handle, e.g. ``create_cluster.output``) or ``ray_conn_id=`` (a
    ``ray`` connection; ``ray_default`` when neither is given), or ``cluster_spec=`` /
    ``cluster_conn_id=`` for a cluster of the task's own. Every other keyword is an argument of
    :class:`SubmitRayJobOperator` (``runtime_env``, ``entrypoint_num_cpus``, ``deferrable``,
    ``job_timeout``, ``stream_logs``, ``cleanup``, ...) or :class:`EphemeralRayJobOperator`, plus
    ``result_uri`` and ``python`` (see :class:`_RayTaskBase`).

    :param python_callable: the function (when used as ``@task.ray`` without parentheses).
    :param multiple_outputs: push each key of a returned dict as its own XCom.
    """
    check_decorator_arguments(kwargs)
    operator_class = OneTaskRayTaskOperator if is_one_task(kwargs) else RayTaskOperator
    if python_callable is not None:
        check_function(python_callable)
    factory = task_decorator_factory(
        python_callable=python_callable,
        multiple_outputs=multiple_outputs,
        decorated_operator_class=operator_class,
        **kwargs,
    )
    if python_callable is not None:
        return factory

    def decorate(function: Callable[..., Any]) -> Any:
        check_function(function)
        return cast("Callable[[Callable[..., Any]], Any]", factory)(function)

    return cast("TaskDecorator", decorate)
