"""The driver of a ``@task.ray`` job: load the pickled call, run it with Ray initialised, frame the outcome.

Shipped as the ``__main__`` of the uploaded task package (beside :mod:`.protocol`, ``payload.pkl`` and
``manifest.json``; see :mod:`airflow_ray_provider.workloads.function.protocol`) and run as
``python -m <package>``, so it needs only Ray on the cluster, not this provider. Every outcome is one
framed message at the end of the log: the value (or where it was written), or the error with its stage
(``setup``: interpreter mismatch, unpickling; ``function``: the user's code raised; ``result``: the value
cannot travel back), type, message and traceback.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any

from . import protocol

STAGE_SETUP = "setup"
STAGE_FUNCTION = "function"
STAGE_RESULT = "result"


class InterpreterMismatchError(Exception):
    """The job's Python or cloudpickle differs from the Airflow side's that pickled the call."""


def _emit(lines: list[str]) -> None:
    """Write frames on lines of their own (a function may leave a line unfinished)."""
    sys.stdout.flush()
    sys.stderr.flush()
    sys.stdout.write("\n" + "\n".join(lines) + "\n")
    sys.stdout.flush()


def _type_name(exc: BaseException) -> str:
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def error_frames(exc: BaseException, stage: str, *, skip_frames: int = 0) -> list[str]:
    """The frames of a failure: stage, type, message and traceback (without the driver's own frames)."""
    tb = exc.__traceback__
    for _ in range(skip_frames):
        tb = tb.tb_next if tb is not None else None
    text = "".join(traceback.format_exception(type(exc), exc, tb))
    error = {"stage": stage, "type": _type_name(exc), "message": str(exc), "traceback": text}
    return protocol.encode_message(protocol.KIND_ERROR, json.dumps(error))


def check_interpreter(manifest: dict[str, Any]) -> None:
    """Refuse a payload this interpreter cannot load reliably (before unpickling it)."""
    problem = protocol.interpreter_mismatch(manifest.get("versions", {}), protocol.runtime_versions())
    if problem:
        raise InterpreterMismatchError(problem)


def submission_id() -> str:
    """This job's submission id (Ray passes the job's metadata to its driver), else a fresh id."""
    try:
        config = json.loads(os.environ.get("RAY_JOB_CONFIG_JSON_ENV_VAR", "{}"))
        return str(config["metadata"]["job_submission_id"])
    except (ValueError, KeyError, TypeError):
        return f"ray-task-{uuid.uuid4().hex}"


def load_call(package: Path) -> tuple[dict[str, Any], Any, tuple[Any, ...], dict[str, Any]]:
    """The manifest and the pickled ``(function, args, kwargs)``, after the interpreter check."""
    manifest = json.loads((package / protocol.MANIFEST_FILE).read_text())
    check_interpreter(manifest)
    from ray import cloudpickle

    function, args, kwargs = cloudpickle.loads((package / protocol.PAYLOAD_FILE).read_bytes())
    return manifest, function, tuple(args), dict(kwargs)


def main() -> int:
    """Run the shipped call; the exit code is 0 only when its value was framed."""
    try:
        manifest, function, args, kwargs = load_call(Path(__file__).resolve().parent)
        import ray

        ray.init()  # the job's cluster (Ray sets RAY_ADDRESS for a job's driver)
    except Exception as exc:
        _emit(error_frames(exc, STAGE_SETUP))
        return 1
    print(f"@task.ray: running {manifest.get('function', '?')} on Ray {ray.__version__}", flush=True)
    try:
        value = function(*args, **kwargs)
    except BaseException as exc:  # SystemExit / KeyboardInterrupt from the function fail the task too
        traceback.print_exc()
        _emit(error_frames(exc, STAGE_FUNCTION, skip_frames=1))
        return 1
    try:
        lines = protocol.encode_value(
            value,
            result_uri=manifest.get("result_uri"),
            name=submission_id(),
            limit=int(manifest.get("inline_limit", protocol.INLINE_RESULT_LIMIT)),
        )
    except Exception as exc:
        _emit(error_frames(exc, STAGE_RESULT))
        return 1
    ray.shutdown()  # no worker log is forwarded between the frames
    _emit(lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
