"""Numbers an operator accepts as Jinja: kept as the template until rendered, then made numbers once.

``SubmitRayJobOperator(job_timeout="{{ params.timeout_s }}", entrypoint_num_cpus="{{ var.value.cpus }}")``
renders strings; :func:`coerce_rendered` turns them into numbers right after rendering, so the run uses
numbers and a rendered value that is not one fails naming the argument, before any job is submitted.
A literal (not templated) value is checked when the DAG is parsed, as before.
"""

from __future__ import annotations

from typing import Any

from airflow_ray_provider.exceptions import RayInvalidInputError


def is_template(value: Any) -> bool:
    """Whether ``value`` is a Jinja template string (rendered later, checked then)."""
    return isinstance(value, str) and any(mark in value for mark in ("{{", "{%", "{#"))


def is_literal(value: Any) -> bool:
    """Whether ``value`` is written in the DAG file as it is used, all the way down: ``None``, numbers,
    strings without Jinja, and lists, tuples and dicts of those (not a Jinja string, an XCom or any other
    object that is rendered or resolved at run time)."""
    if isinstance(value, dict):
        return all(is_literal(key) and is_literal(item) for key, item in value.items())
    if isinstance(value, list | tuple):
        return all(is_literal(item) for item in value)
    return value is None or (isinstance(value, int | float | str) and not is_template(value))


def rendered_number(value: Any, name: str, *, integer: bool = False) -> int | float | None:
    """``value`` as a number (``None`` stays ``None``); a rendered string such as ``"30"`` is parsed.

    :param name: the operator argument, for the error.
    :param integer: require a whole number (returned as ``int``).
    :raises RayInvalidInputError: naming ``name`` when the value is not a number.
    """
    if value is None or (isinstance(value, int | float) and not isinstance(value, bool)):
        number = value
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            number = None
        if number is None or number != number:  # not a number, or NaN
            raise RayInvalidInputError(
                f"{name} must be a number; it rendered to {value!r}: fix the template or the value it reads"
            ) from None
    else:
        raise RayInvalidInputError(f"{name} must be a number, got {type(value).__name__} {value!r}")
    if number is None or not integer:
        return number
    if float(number) != int(number):
        raise RayInvalidInputError(f"{name} must be a whole number, got {value!r}")
    return int(number)


def coerce_rendered(operator: Any, floats: tuple[str, ...] = (), integers: tuple[str, ...] = ()) -> None:
    """Replace the rendered attributes ``floats`` and ``integers`` of ``operator`` by numbers."""
    for name in floats:
        setattr(operator, name, rendered_number(getattr(operator, name), name))
    for name in integers:
        setattr(operator, name, rendered_number(getattr(operator, name), name, integer=True))
