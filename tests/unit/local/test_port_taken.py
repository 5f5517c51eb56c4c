"""A head whose dashboard port went to another process (one that answers, but not in HTTP) is a startup
crash: it is stopped and :func:`start_head` starts it again on fresh ports."""

from __future__ import annotations

import socket
import subprocess
import threading
from pathlib import Path

import pytest

from airflow_ray_provider.local import (
    HEAD_LOG_NAME,
    STARTED_MARKER,
    LocalHeadInfo,
    StartupCrashError,
    _wait_until_up,
)

pytestmark = pytest.mark.unit


def test_a_dashboard_port_that_answers_in_another_protocol_stops_the_head_as_a_crash(tmp_path: Path) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def answer_in_binary() -> None:  # as a gRPC server does to an HTTP request
        connection, _ = server.accept()
        with connection:
            connection.recv(1024)
            connection.sendall(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00\xfe\xff\n\n")

    threading.Thread(target=answer_in_binary, daemon=True).start()
    Path(tmp_path, HEAD_LOG_NAME).write_text(STARTED_MARKER + "\n")
    # the head's process group; its command line names its temp dir, as `ray start --temp-dir` does
    stand_in = subprocess.Popen(["sh", "-c", "sleep 60", str(tmp_path)], start_new_session=True)
    info = LocalHeadInfo(
        name="taken", pid=stand_in.pid, pgid=stand_in.pid, temp_dir=str(tmp_path),
        dashboard_url=f"http://127.0.0.1:{port}", gcs_address="127.0.0.1:1", token_file=None,
    )  # fmt: skip
    try:
        with pytest.raises(StartupCrashError, match="answers, but not in HTTP"):
            _wait_until_up(lambda: None, info, timeout=20)
        assert stand_in.wait(timeout=20) is not None  # the head was stopped
    finally:
        stand_in.kill()
        server.close()
