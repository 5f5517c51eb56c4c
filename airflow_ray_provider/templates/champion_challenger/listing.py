"""Which challengers face the champion: one, a list fixed in the DAG, or every model file under a prefix.

A fixed list is checked when the DAG file is parsed (names unique, none called like the champion).
A prefix is listed at run time by the ``list_challengers`` step, before any cluster starts: every
``.joblib``/``.pkl``/``.pickle`` file under it (``pyarrow.fs``: a local folder, ``s3://``, ``gs://``),
named after the file (``a.joblib`` -> ``a``; the path under the prefix when two files share a name);
the champion's own file and a file named ``champion`` are left out.
Its XCom is the evaluation's ``models`` mapping, champion first; the evaluate job's entrypoint takes it
through a Jinja ``xcom_pull`` rendered into the config JSON. A prefix with no model file skips the run
(``on_no_challengers="skip"``: every later task is skipped) or fails it (``"fail"``, the default).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from airflow.sdk import task

from airflow_ray_provider.exceptions import RayInvalidInputError

CHAMPION = "champion"
MODEL_SUFFIXES = (".joblib", ".pkl", ".pickle")
ON_EMPTY = ("fail", "skip")
#: The ``models`` value of the config JSON until the entrypoint is rendered (see :func:`with_listed_models`).
MODELS_PLACEHOLDER = "__LISTED_MODELS__"
_PULL = "{{ ti.xcom_pull(task_ids='list_challengers') | tojson }}"


def _spec(model: str | Mapping[str, Any]) -> dict[str, Any]:
    return dict(model) if isinstance(model, Mapping) else {"uri": model}


def model_name(uri: str) -> str:
    """The name a model file gets: its file name without the model suffix."""
    return _strip_suffix(posixpath.basename(uri.rstrip("/")))


def _strip_suffix(base: str) -> str:
    for suffix in MODEL_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base


def _named(challengers: Sequence[str | Mapping[str, Any]] | Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    if isinstance(challengers, Mapping):
        return {str(name): _spec(spec) for name, spec in challengers.items()}
    out: dict[str, dict[str, Any]] = {}
    for model in challengers:
        spec = _spec(model)
        source = spec.get("uri") or spec.get("factory") or ""
        name = str(spec.pop("name", None) or model_name(str(source)))
        if name in out:
            raise RayInvalidInputError(
                f"challengers: two challengers are named {name!r} ({out[name].get('uri')} and {source}): "
                "pass them as a mapping {name: uri} with distinct names"
            )
        out[name] = spec
    return out


def fixed_models(
    champion: str | Mapping[str, Any],
    *,
    challenger_uri: str | Mapping[str, Any] | None,
    challengers: Sequence[str | Mapping[str, Any]] | Mapping[str, Any] | None,
    challenger_prefix: str | None,
    on_no_challengers: str,
) -> dict[str, dict[str, Any]] | None:
    """The evaluation's ``models`` (champion first), or ``None`` when they are listed at run time.

    :raises RayInvalidInputError: unless exactly one way of naming challengers is given, on an empty or
        clashing list, and on an unknown ``on_no_challengers``.
    """
    ways = (
        ("challenger_uri", challenger_uri),
        ("challengers", challengers),
        ("challenger_prefix", challenger_prefix),
    )
    given = [name for name, value in ways if value is not None]
    if len(given) != 1:
        raise RayInvalidInputError(
            f"give exactly one of challenger_uri (one model), challengers (a list) or challenger_prefix "
            f"(every model file under a folder, listed at run time); got {given or 'none'}"
        )
    if on_no_challengers not in ON_EMPTY:
        raise RayInvalidInputError(
            f"on_no_challengers must be one of {list(ON_EMPTY)}, got {on_no_challengers!r}"
        )
    if challenger_prefix is not None:
        return None
    named = {"challenger": _spec(challenger_uri)} if challenger_uri is not None else _named(challengers or [])
    if not named:
        raise RayInvalidInputError("challengers is empty: list at least one challenger model")
    if CHAMPION in named:
        raise RayInvalidInputError(
            f"a challenger is named {CHAMPION!r}, the champion's name: rename it (pass {{name: uri}})"
        )
    return {CHAMPION: _spec(champion), **named}


@dataclass(frozen=True)
class ListSpec:
    """What ``list_challengers`` lists (plain data: it travels as the task's templated argument)."""

    champion: str | Mapping[str, Any]
    prefix: str
    on_empty: str = "fail"

    def to_dict(self) -> dict[str, Any]:
        """The task argument (its strings are rendered: ``{{ ds }}`` in the prefix works)."""
        return asdict(self)


def models_under(prefix: str) -> dict[str, dict[str, Any]]:
    """``{name: {"uri": ...}}`` of every model file under ``prefix``, sorted by path.

    :raises RayInvalidInputError: when the prefix cannot be listed.
    """
    import pyarrow.fs as pafs

    from airflow_ray_provider.workloads.common import artifacts

    try:
        fs, path = artifacts.resolve(prefix)
        infos = fs.get_file_info(pafs.FileSelector(path.rstrip("/"), recursive=True, allow_not_found=True))
    except (OSError, ValueError) as exc:
        raise RayInvalidInputError(f"challenger_prefix {prefix!r} cannot be listed: {exc}") from exc
    files = sorted(i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(MODEL_SUFFIXES))
    stems = [model_name(f) for f in files]
    root = path.rstrip("/")
    out: dict[str, dict[str, Any]] = {}
    for file, stem in zip(files, stems, strict=True):
        name = (
            stem
            if stems.count(stem) == 1
            else _strip_suffix(posixpath.relpath(file, root)).replace("/", "__")
        )
        out[name] = {"uri": _uri_of(prefix, path, file)}
    return out


def _uri_of(prefix: str, path: str, file: str) -> str:
    """``file`` (a filesystem path) written the way ``prefix`` was (keeps ``s3://``)."""
    scheme = prefix[: prefix.index("://") + 3] if "://" in prefix else ""
    return f"{scheme}{file}" if scheme and not prefix.startswith("file://") else file


@task(task_id="list_challengers")
def list_challengers(spec: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """List the challengers under the prefix; the XCom is the evaluation's ``models`` mapping."""
    import logging

    from airflow.sdk.exceptions import AirflowSkipException

    listed = ListSpec(**spec)
    champion = _spec(listed.champion)
    found = {
        n: s
        for n, s in models_under(listed.prefix).items()
        if n != CHAMPION and s["uri"] != champion.get("uri")
    }
    if not found:
        message = (
            f"challenger_prefix {listed.prefix!r} holds no model file ({', '.join(MODEL_SUFFIXES)}): "
            "nothing to evaluate"
        )
        if listed.on_empty == "skip":
            raise AirflowSkipException(message + " (on_no_challengers='skip')")
        raise RayInvalidInputError(
            message + ": check the prefix and the registry export, or set on_no_challengers='skip'"
        )
    logging.getLogger(__name__).info("%d challengers under %s: %s", len(found), listed.prefix, list(found))
    return {CHAMPION: champion, **found}


def with_listed_models(entrypoint: list[str]) -> list[str]:
    """The evaluate entrypoint with the listed models rendered into its config JSON at run time."""
    quoted = f'"{MODELS_PLACEHOLDER}"'
    return [part.replace(quoted, _PULL) if quoted in part else part for part in entrypoint]
