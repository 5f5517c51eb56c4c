"""The provider's errors as Airflow sees them: each one also an ``AirflowException`` where it leaves a task.

:mod:`airflow_ray_provider.exceptions` imports no Airflow, so the run lifecycle and the ``airflow-ray`` CLI
can raise its errors without loading Airflow. The operators and the sensor inherit
:class:`AirflowErrors`: an error of the tree that leaves their ``execute``, ``execute_complete`` or
``poke`` becomes, in place, an instance of a subclass of both its own class and ``AirflowException``
(the same object, message, fields, cause and traceback). So ``except RayJobFailedError`` and
``except AirflowException`` both catch it, and Airflow's task runner treats it as its own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

from airflow.sdk.exceptions import AirflowException

from airflow_ray_provider.exceptions import RayProviderError

__all__ = ["AirflowErrors", "airflow_error_type", "as_airflow_error"]

E = TypeVar("E", bound=RayProviderError)
F = TypeVar("F", bound=Callable[..., Any])

#: The methods through which an error leaves a task.
TASK_METHODS = ("execute", "execute_complete", "poke")
_TWINS: dict[type[RayProviderError], type[RayProviderError]] = {}


def _rebuild(cls: type[RayProviderError], args: tuple[Any, ...], state: dict[str, Any]) -> RayProviderError:
    """Unpickle an Airflow-facing error as its own (Airflow-free) class, without calling ``__init__``."""
    error = cls.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


def _reduce(self: RayProviderError) -> tuple[Any, ...]:
    return _rebuild, (airflow_free_type(type(self)), self.args, dict(self.__dict__))


def airflow_free_type(cls: type[E]) -> type[E]:
    """The class of the tree behind ``cls`` (``cls`` itself when it is one)."""
    return getattr(cls, "_airflow_free", cls)


def airflow_error_type(cls: type[E]) -> type[E]:
    """A subclass of ``cls`` and ``AirflowException`` with ``cls``'s name (one per class, made once)."""
    if issubclass(cls, AirflowException):
        return cls
    twin = _TWINS.get(cls)
    if twin is None:
        namespace = {
            "__module__": cls.__module__,
            "__qualname__": cls.__qualname__,
            "__doc__": cls.__doc__,
            "__reduce__": _reduce,  # pickled as ``cls``: the twin is not importable by its name
            "_airflow_free": cls,
        }
        twin = _TWINS[cls] = type(cls.__name__, (cls, AirflowException), namespace)
    return twin  # type: ignore[return-value]


def as_airflow_error(error: E) -> E:
    """Make ``error`` (in place) an ``AirflowException`` too; it stays an instance of its own class."""
    error.__class__ = airflow_error_type(type(error))
    return error


def _mapping(method: F) -> F:
    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except RayProviderError as error:
            as_airflow_error(error)
            raise

    wrapper.__airflow_errors__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


class AirflowErrors:
    """Mixin of the operators and the sensor: errors leaving :data:`TASK_METHODS` are ``AirflowException``."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in TASK_METHODS:
            method = cls.__dict__.get(name)
            if callable(method) and not getattr(method, "__airflow_errors__", False):
                setattr(cls, name, _mapping(method))
