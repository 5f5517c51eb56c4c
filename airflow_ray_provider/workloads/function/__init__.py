"""Functions run as Ray jobs by ``@task.ray``: the driver inside the job, the protocol both sides share.

``protocol`` (manifest, framed log messages, result files) and ``driver`` (the job's ``__main__``) are
shipped to the cluster as a package of their own, so they import nothing else of the provider.
"""

from airflow_ray_provider.workloads.function.protocol import (
    FRAME_PREFIX,
    INLINE_RESULT_LIMIT,
    KIND_ERROR,
    KIND_URI,
    KIND_VALUE,
    MANIFEST_FILE,
    PAYLOAD_FILE,
    Message,
    ResultTransportError,
    encode_value,
    interpreter_mismatch,
    last_message,
    read_result_file,
    runtime_versions,
)

__all__ = [
    "FRAME_PREFIX",
    "INLINE_RESULT_LIMIT",
    "KIND_ERROR",
    "KIND_URI",
    "KIND_VALUE",
    "MANIFEST_FILE",
    "PAYLOAD_FILE",
    "Message",
    "ResultTransportError",
    "encode_value",
    "interpreter_mismatch",
    "last_message",
    "read_result_file",
    "runtime_versions",
]
