"""``airflow-ray``: ``run`` a Ray job from a laptop the way a DAG does (same lifecycle; docs/launch.md),
``jobs list|logs|stop`` and ``clusters list|delete|janitor``. Nothing is imported at import time
(``--help`` is instant) and Airflow only for ``--conn``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from airflow_ray_provider.launch import Target

EXIT_OK, EXIT_JOB_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130
CLEANUP_WORDS = ("never", "on_exception", "always")
#: Flags that only go with another: dest -> the dest it needs.
NEEDS = {
    **dict.fromkeys(("namespace", "spec", "dashboard_url_template", "rayjob", "cluster"), "kuberay_context"),
    **dict.fromkeys(("submission_mode", "ttl_seconds_after_finished"), "rayjob"),
    **dict.fromkeys(("idle_ttl", "replace_pool"), "pool"),
}


class BadInput(Exception):
    """A flag's value is wrong; the message names the flag."""


class _Parser(argparse.ArgumentParser):
    """Argparse, with its errors on one line (``airflow-ray: error: ...``) and exit code 2."""

    def error(self, message: str) -> NoReturn:
        _fail_input(message)


def _fail_input(message: str) -> NoReturn:
    print(f"airflow-ray: error: {message}", file=sys.stderr, flush=True)
    raise SystemExit(EXIT_BAD_INPUT)


#: ``run``'s target flags (one at most), the last three also ``jobs``': flag -> ``add_argument`` keywords.
TARGET_FLAGS: dict[str, dict[str, Any]] = {
    "--local": {"action": "store_true", "help": "an ephemeral Ray head on this machine (default)"},
    "--local-cluster": {"metavar": "NAME", "help": "a local head this provider started (kept)"},
    "--kuberay-context": {
        "metavar": "CTX",
        "help": "an ephemeral RayCluster via this kube context (or --rayjob, or --cluster NAME)",
    },
    "--ray-address": {"metavar": "URL", "help": "a running cluster's dashboard, http://host:8265"},
    "--conn": {"metavar": "CONN_ID", "help": "an Airflow `ray` connection (needs Airflow configured)"},
}
#: ``run``'s other flags: flag -> ``add_argument`` keywords.
RUN_FLAGS: dict[str, dict[str, Any]] = {
    "--namespace": {"metavar": "NS", "help": "the namespace of --kuberay-context's RayCluster"},
    "--spec": {"metavar": "FILE", "help": "the RayCluster spec (YAML/JSON) for --kuberay-context"},
    "--dashboard-url-template": {"metavar": "TEMPLATE", "help": "how to reach a KubeRay dashboard"},
    "--rayjob": {"action": "store_true", "help": "with --kuberay-context: run it as a KubeRay RayJob"},
    "--cluster": {"metavar": "NAME", "help": "with --kuberay-context: a standing RayCluster (kept)"},
    "--submission-mode": {"metavar": "MODE", "help": "with --rayjob: K8sJobMode, HTTPMode or SidecarMode"},
    "--ttl-seconds-after-finished": {"metavar": "SECONDS", "type": int, "help": "with --rayjob (default 30)"},
    "--runtime-env": {"metavar": "FILE", "help": "a Ray runtime_env (YAML or JSON mapping)"},
    "--working-dir": {"metavar": "DIR", "help": "a local folder Ray ships with the job"},
    "--name": {"metavar": "NAME", "help": "the run's name: a rerun with it re-attaches"},
    "--cleanup": {"choices": CLEANUP_WORDS, "default": "on_exception", "help": "docs/launch.md"},
    "--timeout": {"metavar": "SECONDS", "type": float, "help": "stop the job after this long"},
    "--pool": {"metavar": "NAME", "help": "run on this pool's shared cluster (--local or --kuberay-context)"},
    "--idle-ttl": {"metavar": "SECONDS", "type": float, "help": "with --pool: keep it this long idle (600)"},
    "--replace-pool": {"action": "store_true", "help": "with --pool: replace a cluster of another spec"},
    "--entrypoint-num-cpus": {"metavar": "N", "type": float, "help": "CPUs the job holds (it queues)"},
    "--entrypoint-num-gpus": {"metavar": "N", "type": float, "help": "GPUs the job holds (it queues)"},
    "--poll-interval": {"metavar": "SECONDS", "type": float, "default": 1.0, "help": argparse.SUPPRESS},
}


def build_parser() -> argparse.ArgumentParser:
    """The ``airflow-ray`` argument parser."""
    parser = _Parser(prog="airflow-ray", description="Run Ray jobs from a laptop as a DAG would.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="run a command as a Ray job and stream its log")
    target = run.add_mutually_exclusive_group()
    for flag, options in TARGET_FLAGS.items():
        target.add_argument(flag, **options)
    for flag, options in RUN_FLAGS.items():
        run.add_argument(flag, **options)
    run.add_argument("entrypoint", nargs=argparse.REMAINDER, help="-- then the command, e.g. python job.py")

    jobs = sub.add_parser("jobs", help="list, read or stop jobs of a cluster")
    jobs_sub = jobs.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for action in ("list", "logs", "stop"):
        one = jobs_sub.add_parser(action)
        if action != "list":
            one.add_argument("submission_id")
        group = one.add_mutually_exclusive_group(required=True)
        for flag in ("--ray-address", "--conn", "--local-cluster"):
            group.add_argument(flag, **TARGET_FLAGS[flag])

    clusters = sub.add_parser("clusters", help="list or delete the clusters this provider started")
    clusters_sub = clusters.add_subparsers(dest="action", required=True, parser_class=_Parser)
    for action in ("list", "delete", "janitor"):
        one = clusters_sub.add_parser(action)
        if action == "delete":
            one.add_argument("name")
        one.add_argument("--kuberay-context", metavar="CTX", help="KubeRay clusters (default: local heads)")
        one.add_argument("--namespace", metavar="NS", default="default")
    return parser


# --------------------------------------------------------------------------- checking flags (no I/O)
def _read_mapping(flag: str, path: str) -> dict[str, Any]:
    import yaml

    try:
        value = yaml.safe_load(Path(path).read_text())
    except OSError as exc:
        raise BadInput(f"{flag}: cannot read {path!r}: {exc.strerror or exc}") from exc
    except yaml.YAMLError as exc:
        raise BadInput(f"{flag}: {path!r} is not YAML or JSON: {str(exc).splitlines()[0]}") from exc
    if not isinstance(value, dict):
        raise BadInput(f"{flag}: {path!r} must hold a mapping, got {type(value).__name__}")
    return value


def _check_context(context: str) -> None:
    try:
        from kubernetes import config
    except ImportError as exc:
        raise BadInput("--kuberay-context: install the kubernetes extra (pip install kubernetes)") from exc
    try:
        contexts, _ = config.list_kube_config_contexts()
    except Exception as exc:
        raise BadInput(f"--kuberay-context: cannot read the kubeconfig: {exc}") from exc
    names = sorted(c["name"] for c in contexts or [])
    if context not in names:
        raise BadInput(
            f"--kuberay-context: no context {context!r} in the kubeconfig (it has: {', '.join(names)})"
        )


def _given(args: argparse.Namespace, dests: tuple[str, ...]) -> str | None:
    """The first of these flags that was given, as typed."""
    return next(("--" + d.replace("_", "-") for d in dests if getattr(args, d) not in (None, False)), None)


def run_target(args: argparse.Namespace) -> Target:
    """The target the flags name; every check, before any cluster exists."""
    from airflow_ray_provider.launch import Connection, LocalHead, RayAddress, StandingCluster

    for dest, needed in NEEDS.items():
        flag = _given(args, (dest,))
        if flag and not getattr(args, needed):
            raise BadInput(f"{flag}: only with --{needed.replace('_', '-')}")
    if args.kuberay_context:
        return _kube_target(args)
    if args.local_cluster:
        return StandingCluster(args.local_cluster)
    if args.ray_address:
        return RayAddress(args.ray_address)
    if args.conn:
        return Connection(_airflow_client(args.conn))
    return LocalHead()


def _kube_target(args: argparse.Namespace) -> Target:
    """``--kuberay-context``: an ephemeral RayCluster, a RayJob (``--rayjob``) or a standing cluster."""
    from airflow_ray_provider.launch import KubeRayCluster, KubeRayJob, StandingCluster

    if not args.namespace:
        raise BadInput("--namespace: needed with --kuberay-context")
    if args.cluster and (args.spec or args.rayjob):
        other = "--spec" if args.spec else "--rayjob"
        raise BadInput(f"--cluster: a standing cluster runs the job over its Job API; drop {other}")
    spec = _read_mapping("--spec", args.spec) if args.spec else None
    _check_context(args.kuberay_context)
    context, namespace, template = args.kuberay_context, args.namespace, args.dashboard_url_template
    if args.cluster:
        return StandingCluster(args.cluster, namespace, context, template)
    if args.rayjob:
        return KubeRayJob(
            context, namespace, spec, submission_mode=args.submission_mode or "K8sJobMode",
            ttl_seconds_after_finished=args.ttl_seconds_after_finished, dashboard_url_template=template,
        )  # fmt: skip
    return KubeRayCluster(context, namespace, spec, template)  # its spec is checked by launch.run


def _named(exc: Exception, args: argparse.Namespace) -> str:
    """A bad-input error of ``run`` with its flag: the given flag of the field its message starts with
    (``pool.idle_ttl``, ``runtime_env['working_dir']``), else of the target it is about."""
    text = str(exc)
    words = re.match(r"(\w*)(?:\.|\[')?(\w*)", text).groups()  # type: ignore[union-attr]
    dests = tuple(word for word in reversed(words) if f"--{word.replace('_', '-')}" in RUN_FLAGS)
    flag = _given(args, (*dests, "cluster", "local_cluster", "ray_address"))
    flag = flag or ("--spec" if args.kuberay_context else None)
    flag = flag or ("ENTRYPOINT" if words[0] == "entrypoint" else None)
    return f"{flag}: {text}" if flag else text


def _airflow_client(conn_id: str) -> Any:
    """The Job API client of an Airflow ``ray`` connection (imports Airflow: only ``--conn`` does)."""
    from airflow_ray_provider.exceptions import RayProviderError
    from airflow_ray_provider.hooks.ray_job import RayJobHook

    try:
        return RayJobHook(conn_id).client  # resolves the connection now: a missing one is bad input
    except RayProviderError as exc:
        raise BadInput(f"--conn: {exc}") from exc


def _job_client(args: argparse.Namespace) -> Any:
    """The Job API client of ``jobs`` subcommands (no retry: a one-shot command says at once what failed)."""
    from airflow_ray_provider.jobs.client import JobClient, ray_token_from_environment

    if args.conn:
        return _airflow_client(args.conn)
    if args.local_cluster:
        from airflow_ray_provider.clusters import LocalBackend

        backend = LocalBackend()
        try:
            return backend.job_client(backend.attach(args.local_cluster), retry_attempts=1)
        except ValueError as exc:
            raise BadInput(f"--local-cluster: {exc}") from exc
    if not args.ray_address.startswith(("http://", "https://")):
        raise BadInput(f"--ray-address: must be http(s)://host:port, got {args.ray_address!r}")
    return JobClient(args.ray_address, token=ray_token_from_environment(), retry_attempts=1)


# --------------------------------------------------------------------------- commands
def cmd_run(args: argparse.Namespace) -> int:
    """``airflow-ray run``."""
    entrypoint = args.entrypoint[1:] if args.entrypoint[:1] == ["--"] else args.entrypoint
    if not entrypoint:
        raise BadInput("ENTRYPOINT: pass the command after --, e.g. airflow-ray run --local -- python job.py")
    if args.timeout is not None and args.timeout <= 0:
        raise BadInput(f"--timeout: must be positive, got {args.timeout:g}")
    runtime_env = _read_mapping("--runtime-env", args.runtime_env) if args.runtime_env else None
    pool = {"name": args.pool, "replace": args.replace_pool} if args.pool else None
    if pool is not None and args.idle_ttl is not None:
        pool["idle_ttl"] = args.idle_ttl

    from airflow_ray_provider.launch import run

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # a kill is Ctrl-C: stop, delete, exit 130
    names = ("name", "working_dir", "cleanup", "timeout", "poll_interval", "entrypoint_num_cpus",
             "entrypoint_num_gpus")  # fmt: skip
    flags = {name: getattr(args, name) for name in names}
    result = run(entrypoint, target=run_target(args), runtime_env=runtime_env, pool=pool, **flags)
    print(
        f"airflow-ray: Ray job {result.state.submission_id} SUCCEEDED (run {result.name!r})", file=sys.stderr
    )
    return EXIT_OK


def cmd_jobs(args: argparse.Namespace) -> int:
    """``airflow-ray jobs list|logs|stop``."""
    client = _job_client(args)
    if args.action == "list":
        for job in client.list_jobs():
            print(f"{job.submission_id}\t{job.status.value}\t{job.entrypoint or ''}")
    elif args.action == "logs":
        print(client.get_logs(args.submission_id), end="")
    else:
        print(json.dumps({"submission_id": args.submission_id, "stopped": client.stop(args.submission_id)}))
    return EXIT_OK


def cmd_clusters(args: argparse.Namespace) -> int:
    """``airflow-ray clusters list|delete|janitor`` (local heads, or KubeRay through a context)."""
    from airflow_ray_provider.clusters import ClusterBackend, LocalBackend

    backend: ClusterBackend
    if args.kuberay_context:
        from airflow_ray_provider.launch import kuberay_backend

        _check_context(args.kuberay_context)
        backend = kuberay_backend(args.kuberay_context, args.namespace)
    else:
        backend = LocalBackend()
    try:
        for found in backend.listed() if args.action == "list" else []:  # expired or not
            handle, run = found.handle, f"{found.dag_id}/{found.run_id}" if found.run_id else "-"
            expires = (handle.extra or {}).get("expires_at") or "-"
            print(f"{handle.name}\t{handle.backend}\t{handle.dashboard_url}\trun {run}\texpires {expires}")
        if args.action == "delete":  # by name, also a cluster still starting (never ready)
            deleted = backend.delete(backend.find(args.name), wait=True, timeout=300)
            print(json.dumps({"name": args.name, "deleted": deleted}))
        if args.action == "janitor":
            from airflow_ray_provider.launch import janitor_sweep

            expired, pools = janitor_sweep(backend, lambda message: None)
            for name in pools:
                print(f"deleted {name} (an idle pool)")
            for name in expired:
                print(f"deleted {name} (expired)")
    finally:
        backend.close()
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """The console script: every user-facing error is one line (exit 2 for bad input, 1 otherwise)."""
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    args = build_parser().parse_args(argv)
    commands = {"run": cmd_run, "jobs": cmd_jobs, "clusters": cmd_clusters}
    from airflow_ray_provider.exceptions import RayInvalidInputError, RayProviderError

    try:
        return commands[args.command](args)
    except BadInput as exc:
        _fail_input(str(exc))
    except RayInvalidInputError as exc:  # found before anything was created
        _fail_input(_named(exc, args) if args.command == "run" else str(exc))
    except RayProviderError as exc:
        print(f"airflow-ray: {exc}", file=sys.stderr, flush=True)
        return EXIT_JOB_FAILED
    except KeyboardInterrupt:
        print("airflow-ray: interrupted", file=sys.stderr, flush=True)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
