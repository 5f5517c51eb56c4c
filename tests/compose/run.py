"""End to end on docker-compose.yaml: build, start the whole stack, run the shipped DAGs, tear down.

What it proves (``make compose-test``, docs/compose.md): the images build from the real Dockerfiles;
every service of the user's compose file becomes healthy with generated secrets; ``nightly_model_validation``
and ``zone_training``, triggered through Airflow's REST API, succeed on the compose Ray cluster; the
evaluate task was deferred to the real triggerer and resumed; the head's dashboard (token auth) lists the
Ray jobs and both nodes; the decision and report are on the shared volume; ``down -v`` leaves nothing.

Every wait is bounded; on failure the services' logs are printed. The stack runs as its own compose
project on free local ports, so it never meets a user's stack.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any, TypeVar

from tests.compose import images

REPO = images.REPO
DAGS = ("nightly_model_validation", "zone_training")
SERVICES = (
    "postgres", "ray-head", "ray-worker", "airflow-apiserver", "airflow-scheduler",
    "airflow-dag-processor", "airflow-triggerer",
)  # fmt: skip
HEALTHY_TIMEOUT_S = 420
DAG_PARSE_TIMEOUT_S = 180
RUN_TIMEOUT_S = 900
PASSWORD_FILE = "/opt/airflow/simple_auth_manager_passwords.json.generated"
T = TypeVar("T")


def log(message: str) -> None:
    print(f"[compose-test {time.strftime('%H:%M:%S')}] {message}", flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for(what: str, probe: Callable[[], T | None], timeout_s: float, every_s: float = 2.0) -> T:
    """Call ``probe`` until it returns something other than None; fail naming ``what`` after the timeout."""
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = probe()
        except Exception as exc:  # a probe that raises is retried; the last error is reported
            last_error, value = exc, None
        if value is not None:
            return value
        time.sleep(every_s)
    raise TimeoutError(f"{what}: not within {timeout_s:.0f} s (last error: {last_error})")


class Stack:
    """One compose project of docker-compose.yaml with generated secrets, images and ports."""

    def __init__(self, image_env: dict[str, str], eval_rows: int) -> None:
        self.project = f"arp-compose-test-{os.getpid()}"
        self.ray_token = secrets.token_hex(32)
        self.airflow_port, self.ray_port = free_port(), free_port()
        self.env = {
            **os.environ, **image_env,
            "RAY_AUTH_TOKEN": self.ray_token,
            "AIRFLOW_JWT_SECRET": secrets.token_hex(32),
            "AIRFLOW_FERNET_KEY": base64.urlsafe_b64encode(os.urandom(32)).decode(),
            "AIRFLOW_PORT": str(self.airflow_port),
            "RAY_DASHBOARD_PORT": str(self.ray_port),
            "AIRFLOW_RAY_EVAL_ROWS": str(eval_rows),
        }  # fmt: skip
        self.api_token = ""

    # -- compose ---------------------------------------------------------------------------------------
    def compose(self, *args: str, timeout_s: float = 600, check: bool = True) -> str:
        command = ["docker-compose", "-p", self.project, "-f", str(REPO / "docker-compose.yaml"), *args]
        done = subprocess.run(
            command, env=self.env, cwd=REPO, capture_output=True, text=True, timeout=timeout_s, check=False
        )
        if check and done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
        return done.stdout

    def container(self, service: str) -> str:
        return self.compose("ps", "-q", service).strip()

    def health(self, service: str) -> str:
        cid = self.container(service)
        if not cid:
            return "missing"
        status = "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}"
        out = subprocess.run(
            ["docker", "inspect", "-f", status, cid], capture_output=True, text=True, check=False
        )
        return out.stdout.strip()

    def exec(self, service: str, *command: str) -> str:
        return self.compose("exec", "-T", service, *command, timeout_s=120)

    def print_logs(self) -> None:
        print(self.compose("ps", check=False), flush=True)
        print(self.compose("logs", "--no-color", "--tail=150", check=False, timeout_s=120), flush=True)

    # -- HTTP ------------------------------------------------------------------------------------------
    def http(
        self, method: str, url: str, body: Any = None, token: str | None = None, expect: int = 200
    ) -> Any:
        request = urllib.request.Request(url, method=method)
        if body is not None:
            request.data = json.dumps(body).encode()
            request.add_header("Content-Type", "application/json")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                status, payload = response.status, response.read()
        except urllib.error.HTTPError as exc:
            status, payload = exc.code, exc.read()
        if status != expect:
            raise RuntimeError(f"{method} {url}: HTTP {status} (expected {expect}): {payload[:500]!r}")
        try:
            return json.loads(payload) if payload else None
        except ValueError:  # an error page, e.g. Ray's 401
            return payload.decode(errors="replace")

    def airflow(self, method: str, path: str, body: Any = None, expect: int = 200) -> Any:
        url = f"http://127.0.0.1:{self.airflow_port}{path}"
        return self.http(method, url, body, token=self.api_token, expect=expect)

    def ray(self, path: str, token: str | None = "", expect: int = 200) -> Any:
        url = f"http://127.0.0.1:{self.ray_port}{path}"
        return self.http("GET", url, token=self.ray_token if token == "" else token, expect=expect)


def wait_healthy(stack: Stack) -> None:
    def all_healthy() -> bool | None:
        states = {service: stack.health(service) for service in SERVICES}
        bad = {s: v for s, v in states.items() if v in ("unhealthy", "exited", "dead")}
        if bad:
            raise SystemExit(f"services failed: {bad}")
        return True if all(v == "healthy" for v in states.values()) else None

    wait_for("every service healthy", all_healthy, HEALTHY_TIMEOUT_S, every_s=3)


def login(stack: Stack) -> None:
    """A JWT for the simple auth manager's admin, whose generated password the api-server wrote."""
    passwords = wait_for("the admin password file", lambda: json.loads(stack.exec(
        "airflow-apiserver", "cat", PASSWORD_FILE)), 60)  # fmt: skip
    response = stack.http(
        "POST", f"http://127.0.0.1:{stack.airflow_port}/auth/token",
        {"username": "admin", "password": passwords["admin"]}, expect=201,
    )  # fmt: skip
    stack.api_token = response["access_token"]
    stack.airflow("GET", "/api/v2/dags?limit=1")  # the token is accepted
    stack.http("GET", f"http://127.0.0.1:{stack.airflow_port}/api/v2/dags", expect=401)  # and needed


def trigger(stack: Stack, dag_id: str) -> str:
    """Trigger ``dag_id`` at its next scheduled logical date, then unpause it; returns the run id.

    The explicit logical date is the one the scheduler would create next, so unpausing adds no second
    (scheduled) run. (Runs with ``logical_date: null`` work too since the shipped DAGs use ``RUN_DATE``;
    ``tests/integration/test_airflow_services.py`` triggers one that way.)
    """
    dag = wait_for(f"{dag_id} parsed", lambda: stack.airflow("GET", f"/api/v2/dags/{dag_id}"),
                   DAG_PARSE_TIMEOUT_S)  # fmt: skip
    logical_date = dag.get("next_dagrun_logical_date") or time.strftime("%Y-%m-%dT00:00:00Z", time.gmtime())
    run = stack.airflow("POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": logical_date, "conf": {}})
    stack.airflow("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})
    log(f"{dag_id}: triggered run {run['dag_run_id']} (logical date {logical_date})")
    return str(run["dag_run_id"])


def wait_success(stack: Stack, runs: dict[str, str]) -> None:
    def finished() -> bool | None:
        states = {}
        for dag_id, run_id in runs.items():
            states[dag_id] = stack.airflow("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]
        if "failed" in states.values():
            for dag_id, run_id in runs.items():
                print_task_states(stack, dag_id, run_id)
            raise SystemExit(f"DAG runs failed: {states}")
        return True if all(s == "success" for s in states.values()) else None

    wait_for(f"DAG runs {runs} successful", finished, RUN_TIMEOUT_S, every_s=5)


def task_instances(stack: Stack, dag_id: str, run_id: str) -> list[dict[str, Any]]:
    path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=100"
    return list(stack.airflow("GET", path)["task_instances"])


def print_task_states(stack: Stack, dag_id: str, run_id: str) -> None:
    for ti in task_instances(stack, dag_id, run_id):
        print(f"  {dag_id} {ti['task_id']}[{ti.get('map_index')}]: {ti['state']} (try {ti['try_number']})")
        if ti["state"] in ("failed", "upstream_failed"):
            print(task_log(stack, dag_id, run_id, ti)[-3000:])


def task_log(stack: Stack, dag_id: str, run_id: str, ti: dict[str, Any]) -> str:
    path = (f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{ti['task_id']}/logs/"
            f"{max(ti['try_number'], 1)}?map_index={ti.get('map_index', -1)}&full_content=true")  # fmt: skip
    content = stack.airflow("GET", path).get("content")
    if isinstance(content, list):
        return "\n".join(e.get("event", "") if isinstance(e, dict) else str(e) for e in content)
    return str(content)


def check_deferred(stack: Stack, run_id: str) -> None:
    """The evaluate task handed its wait to the real triggerer and resumed on the trigger's event.

    Its log (the api-server merges the task's and the triggerer's files, ``attempt=1.log.trigger.<job>``)
    shows the deferral, the trigger starting and firing in the triggerer, then the resumed task.
    """
    ti = next(t for t in task_instances(stack, DAGS[0], run_id) if t["task_id"] == "evaluate")
    assert ti["state"] == "success", ti
    text = task_log(stack, DAGS[0], run_id, ti)
    marks = ["Pausing task as DEFERRED", ".log.trigger.", " starting", "Trigger fired event", "SUCCEEDED"]
    positions = [text.find(mark, text.find(marks[0]) if i > 1 else 0) for i, mark in enumerate(marks)]
    assert all(p >= 0 for p in positions), f"the evaluate log lacks one of {marks}:\n{text[-3000:]}"
    assert positions[3] < text.rfind("SUCCEEDED"), f"the task did not resume after the event:\n{text[-3000:]}"
    log("evaluate: deferred, its trigger started and fired in the triggerer, the task resumed and succeeded")


def check_ray(stack: Stack) -> None:
    """The head's dashboard (token auth) lists the DAGs' jobs as succeeded, and both nodes alive."""
    stack.ray("/api/jobs/", token=None, expect=401)
    jobs = stack.ray("/api/jobs/")
    steps = {(job.get("metadata") or {}).get("step"): job["status"] for job in jobs}
    assert steps.get("evaluate") == "SUCCEEDED", f"no succeeded evaluate job on the compose head: {steps}"
    failed = [job["entrypoint"][:120] for job in jobs if job["status"] not in ("SUCCEEDED",)]
    log(f"Ray dashboard: {len(jobs)} jobs, evaluate SUCCEEDED, not succeeded: {failed or 'none'}")
    nodes = stack.ray("/api/v0/nodes?limit=10")["data"]["result"]["result"]
    alive = [node for node in nodes if node["state"] == "ALIVE"]
    assert len(alive) == 2, f"expected the head and the worker alive, got {nodes}"
    log("Ray nodes: head and worker alive")


def check_artifacts(stack: Stack, nightly_run: str) -> None:
    """The decision and the report are on the shared volume, as seen from a Ray node."""
    decide = next(t for t in task_instances(stack, DAGS[0], nightly_run) if t["task_id"] == "decide")
    xcom = stack.airflow(
        "GET", f"/api/v2/dags/{DAGS[0]}/dagRuns/{nightly_run}/taskInstances/decide/xcomEntries/return_value"
    )
    decision = xcom["value"] if isinstance(xcom["value"], dict) else json.loads(xcom["value"])
    artifact = str(decision["artifact_uri"]).rstrip("/")
    assert artifact.startswith("/opt/arp/data/"), decision
    listing = stack.exec("ray-worker", "ls", "-l", artifact)
    for name in ("metrics.json", "report.html", "report.md"):
        assert name in listing, f"{name} missing in {artifact}:\n{listing}"
    report = stack.exec("ray-worker", "cat", f"{artifact}/report.md")
    assert f"Decision: **{decision['outcome']}**" in report, report[:1000]
    log(f"shared volume: {artifact} has metrics.json, report.html, report.md; decision {decision['outcome']}"
        f" (decide task {decide['state']})")  # fmt: skip
    models = stack.exec("ray-worker", "find", "/opt/arp/data/zone_models", "-name", "*.json")
    assert models.strip(), "zone_training wrote no manifest under /opt/arp/data/zone_models"


def check_nothing_left(stack: Stack) -> None:
    label = f"label=com.docker.compose.project={stack.project}"
    left = {
        kind: subprocess.run(["docker", kind, "ls", "-q", "--filter", label] + (["-a"] if kind == "container"
                             else []), capture_output=True, text=True, check=True).stdout.split()
        for kind in ("container", "network", "volume")
    }  # fmt: skip
    assert not any(left.values()), f"down -v left {left}"
    log("down -v: no container, network or volume of the project left")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--base", choices=("standin", "official"), default="standin")
    parser.add_argument("--eval-rows", type=int, default=20000, help="rows of the generated daily partition")
    parser.add_argument("--keep", action="store_true", help="leave the stack running (no down -v)")
    args = parser.parse_args(argv)
    for tool in ("docker", "docker-compose"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (apt-get install docker.io docker-compose)")
    started = time.monotonic()
    phases: dict[str, float] = {}

    def phase(name: str) -> None:
        phases[name] = time.monotonic() - started
        log(f"{name} at {phases[name]:.0f} s")

    stack = Stack(images.build_all(args.base), args.eval_rows)
    phase("images ready")
    ok = False
    try:
        stack.compose("up", "-d", "--no-build", timeout_s=HEALTHY_TIMEOUT_S)
        wait_healthy(stack)
        phase("stack healthy")
        login(stack)
        runs = {dag_id: trigger(stack, dag_id) for dag_id in DAGS}
        wait_success(stack, runs)
        phase("DAG runs succeeded")
        check_deferred(stack, runs[DAGS[0]])
        check_ray(stack)
        check_artifacts(stack, runs[DAGS[0]])
        ok = True
    finally:
        if not ok:
            log("FAILED: the services' logs follow")
            stack.print_logs()
        if not args.keep:
            stack.compose("down", "-v", "--remove-orphans", "--timeout", "10", timeout_s=180, check=ok)
    if not args.keep:
        check_nothing_left(stack)
    phase("done")
    log("PASS: " + ", ".join(f"{name} {seconds:.0f} s" for name, seconds in phases.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
