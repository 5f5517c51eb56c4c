"""The ``@task.ray`` protocol: framed messages survive a noisy log, values pick their transport, versions
are compared before unpickling (the driver's checks run here in-process; the job side is covered by
``tests/integration/decorators``)."""

from __future__ import annotations

import json

import pytest

from airflow_ray_provider.workloads.function import protocol
from airflow_ray_provider.workloads.function.driver import InterpreterMismatchError, check_interpreter

pytestmark = pytest.mark.unit


def test_a_chunked_value_is_read_back_from_a_noisy_log():
    value = {"rows": list(range(5000)), "name": "zone é"}
    frames = protocol.encode_value(value, result_uri=None, name="job-1")
    assert len(frames) > 1  # longer than one chunk
    log = "\n".join(["starting", "partial line without newline" + frames[0], *frames, "(worker) bye"])
    message = protocol.last_message(log)
    assert message is not None and message.kind == protocol.KIND_VALUE
    assert message.data == value


def test_the_last_intact_message_wins_and_broken_ones_are_ignored():
    first = protocol.encode_message(protocol.KIND_VALUE, json.dumps(1))
    second = protocol.encode_message(protocol.KIND_VALUE, json.dumps(2))
    tampered = [line.replace(" 3", " 4") for line in protocol.encode_message(protocol.KIND_VALUE, "3")]
    assert protocol.last_message("\n".join([*first, *second, *tampered])).data == 2
    assert protocol.last_message("no frames here") is None


def test_a_value_over_the_inline_limit_without_a_uri_names_the_limit():
    with pytest.raises(
        protocol.ResultTransportError, match=r"is 202 bytes as JSON.*at most 100 bytes.*result_uri="
    ):
        protocol.encode_value("x" * 200, result_uri=None, name="job-1", limit=100)


def test_a_non_json_value_without_a_uri_names_its_type_the_limit_and_the_fix():
    with pytest.raises(
        protocol.ResultTransportError,
        match=r"builtins.object\) is not JSON-serialisable, and the job log carries only JSON of at most "
        r"1,048,576 bytes \(1 MiB\); set result_uri=",
    ):
        protocol.encode_value(object(), result_uri=None, name="job-1")


def test_a_non_json_value_goes_through_the_result_uri(tmp_path):
    value = {1, 2, 3}
    frames = protocol.encode_value(value, result_uri=str(tmp_path), name="job-7")
    message = protocol.last_message("\n".join(frames))
    assert message is not None and message.kind == protocol.KIND_URI
    assert message.data["uri"] == f"{tmp_path}/job-7/return_value.pkl"
    assert protocol.read_result_file(message.data) == value
    (tmp_path / "job-7" / "return_value.pkl").write_bytes(b"changed")
    with pytest.raises(protocol.ResultTransportError, match="incomplete or was changed"):
        protocol.read_result_file(message.data)


def test_an_interpreter_mismatch_names_both_sides_before_unpickling():
    here = protocol.runtime_versions()
    check_interpreter({"versions": here})  # the same interpreter passes
    with pytest.raises(InterpreterMismatchError) as excinfo:
        check_interpreter({"versions": {"python": "3.9", "cloudpickle": "2.2.1"}})
    message = str(excinfo.value)
    assert "Python 3.9 with cloudpickle 2.2.1" in message
    assert f"Python {here['python']} with cloudpickle {here['cloudpickle']}" in message
