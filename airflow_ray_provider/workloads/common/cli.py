"""Command-line and config-file handling shared by the workloads (``--config FILE`` or ``--config-json``).

Both workload commands exit with the same codes (:class:`ExitCode`, documented in docs/workloads.md):

== ===========================================================================================
0  success: the artifact is written
1  the work ran and failed: an evaluation block or Ray failed; zone training: more zones failed
   than ``max_failed_fraction`` allows (its artifact is still written, for ``--only-failed``)
2  bad input, found before any work: config, data, models, ``--only-failed`` manifest, or an
   output location that cannot be written; nothing was scored or trained
== ===========================================================================================
"""

from __future__ import annotations

import argparse
import enum
import gc
import json
from collections.abc import Callable, Sequence
from typing import Any

from airflow_ray_provider.workloads.common.errors import ArtifactError, ConfigError, DataError, WorkloadError


class ExitCode(enum.IntEnum):
    """The exit status of a workload command (the table in the module docstring)."""

    OK = 0
    FAILED = 1
    BAD_INPUT = 2


def exit_code_for(exc: WorkloadError) -> ExitCode:
    """Bad input (config, data, an output that cannot be written) is 2; a failure of the work is 1."""
    return ExitCode.BAD_INPUT if isinstance(exc, ConfigError | DataError | ArtifactError) else ExitCode.FAILED


def build_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """An argument parser with the two ways of passing a config that every workload accepts."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    src = parser.add_mutually_exclusive_group(required=True)
    src.add_argument("--config", help="path or URI of a JSON or YAML config file")
    src.add_argument("--config-json", help="the config itself, as a JSON string")
    return parser


def load_config(*, path: str | None = None, inline_json: str | None = None) -> dict[str, Any]:
    """Load a workload config from a JSON/YAML file (local or a pyarrow.fs URI) or a JSON string.

    :raises ConfigError: when the file is missing or the text does not parse to a mapping.
    """
    if (path is None) == (inline_json is None):
        raise ConfigError("pass exactly one of --config FILE or --config-json TEXT")
    if inline_json is not None:
        text, where = inline_json, "--config-json"
    else:
        from airflow_ray_provider.workloads.common.artifacts import read_bytes
        from airflow_ray_provider.workloads.common.errors import ArtifactError

        assert path is not None
        try:
            text, where = read_bytes(path).decode(), path
        except ArtifactError as exc:
            raise ConfigError(f"config file {path!r} could not be read: {exc}") from exc
    data = _parse(text, where, yaml_ok=path is not None and not path.endswith(".json"))
    if not isinstance(data, dict):
        raise ConfigError(f"config {where} must be a mapping (JSON object), got {type(data).__name__}")
    return data


def _parse(text: str, where: str, *, yaml_ok: bool) -> Any:
    """JSON, else YAML (when allowed); a key given twice in one mapping is refused, not overwritten."""
    try:
        return json.loads(text, object_pairs_hook=lambda pairs: _unique(pairs, where))
    except ConfigError:
        raise
    except ValueError as json_exc:
        if not yaml_ok:
            raise ConfigError(f"config {where} is not valid JSON: {json_exc}") from json_exc
    import yaml

    class UniqueKeyLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
            pairs = [(self.construct_object(k, deep=deep), v) for k, v in node.value]
            _unique(pairs, where)
            return super().construct_mapping(node, deep=deep)

    try:
        return yaml.load(text, Loader=UniqueKeyLoader)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config {where} is neither valid JSON nor YAML: {exc}") from exc


def _unique(pairs: list[tuple[Any, Any]], where: str) -> dict[Any, Any]:
    """``dict(pairs)``, refusing a repeated key (JSON and YAML parsers keep the last one silently)."""
    seen: dict[Any, Any] = {}
    for key, value in pairs:
        if key in seen:
            raise ConfigError(
                f"config {where} gives the key {key!r} twice in one mapping (a model name, like every "
                f"key, must be unique): rename or remove one of them"
            )
        seen[key] = value
    return seen


def config_from_argv(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> tuple[argparse.Namespace, dict[str, Any]]:
    """Parse ``argv`` and load the config it names."""
    args = parser.parse_args(argv)
    return args, load_config(path=args.config, inline_json=args.config_json)


def run_main(main: Callable[[], int]) -> int:
    """Run a workload CLI's ``main`` and collect garbage before the interpreter starts exiting.

    An exception's traceback keeps the frames that read the data, and with them Arrow objects, in
    reference cycles. Freed only during interpreter teardown, after Arrow's thread pools are gone, they
    can abort the process with "terminate called without an active exception" (apache/arrow#34314).
    Under load, a bad-input ``zone_training`` run aborts that way (exit -6 instead of 2) in about one
    run of 15 without this collection, and in none of 150 with it.
    """
    try:
        return main()
    finally:
        gc.collect()
