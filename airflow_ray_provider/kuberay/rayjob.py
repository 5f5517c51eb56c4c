"""The ``ray.io/v1`` RayJob body: what to run, and a ``rayClusterSpec`` (KubeRay creates the cluster) or a
``clusterSelector`` (a standing RayCluster); KubeRay's ``ValidateRayJobSpec`` rules are checked here first.
"""

from __future__ import annotations

import itertools
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from airflow_ray_provider.kuberay import validation as v
from airflow_ray_provider.kuberay.spec import API_VERSION, LABEL_KUEUE_QUEUE
from airflow_ray_provider.kuberay.validation import KubeRaySpecError, check_name

KIND = "RayJob"
#: KubeRay's submission modes this provider drives: a submitter Kubernetes Job (the default), the operator
#: over HTTP, or a submitter container beside the head (``SidecarMode``, KubeRay 1.6+: no extra pod).
SUBMISSION_MODES = ("K8sJobMode", "HTTPMode", "SidecarMode")
#: KubeRay's ``DeletionPolicyType`` values, in the order a ``deletionRules`` TTL must not decrease.
DELETION_POLICIES = ("DeleteWorkers", "DeleteCluster", "DeleteSelf", "DeleteNone")
#: What a deletion rule's ``condition`` may wait for: a ``jobStatus`` or, instead, a ``jobDeploymentStatus``.
DELETION_CONDITIONS = {"jobStatus": ("SUCCEEDED", "FAILED"), "jobDeploymentStatus": ("Failed",)}
#: The key KubeRay reads from ``clusterSelector`` (``RayJobDefaultClusterSelectorKey``).
CLUSTER_SELECTOR_KEY = "ray.io/cluster"
#: When ``shutdownAfterJobFinishes`` is on and no TTL is given: seconds the cluster stays after the job,
#: so the task can still read the last lines of the job's log through the dashboard.
DEFAULT_TTL_SECONDS = 30

_REMOTE_URI = re.compile(r"^[a-z][a-z0-9+.-]*://")


@dataclass(frozen=True)
class RayJobOptions:
    """What the RayJob runs and the rules Kubernetes enforces on it (everything but the cluster).

    Each field is the ``KubeRayJobOperator`` argument of that name (its docstring says what each does);
    ``job_id`` is the Ray submission id (``spec.jobId``), deterministic per task instance, ``runtime_env``
    is sent as ``runtimeEnvYAML`` (remote URIs only), and each of ``deletion_rules`` is
    ``{"policy": "DeleteWorkers" | "DeleteCluster" | "DeleteSelf" | "DeleteNone", "condition":
    {"jobStatus": "SUCCEEDED" | "FAILED"} or {"jobDeploymentStatus": "Failed"}, plus "ttlSeconds"}``.
    """

    entrypoint: str
    job_id: str | None = None
    runtime_env: dict[str, Any] = field(default_factory=dict)
    metadata: dict[str, str] = field(default_factory=dict)
    entrypoint_num_cpus: float | None = None
    entrypoint_num_gpus: float | None = None
    entrypoint_resources: dict[str, float] | None = None
    shutdown_after_job_finishes: bool = True
    ttl_seconds_after_finished: int | None = None
    active_deadline_seconds: int | None = None
    backoff_limit: int | None = None
    submission_mode: str = "K8sJobMode"
    suspend: bool = False
    queue_name: str | None = None
    deletion_rules: list[dict[str, Any]] | None = None
    pre_running_deadline_seconds: int | None = None


def _check_runtime_env(runtime_env: Any) -> None:
    if not isinstance(runtime_env, dict) or not all(isinstance(k, str) for k in runtime_env):
        raise KubeRaySpecError("runtime_env must be a dict with string keys")
    for key in ("working_dir", "py_modules"):
        values = runtime_env.get(key)
        values = values if isinstance(values, list) else [values] if values is not None else []
        local = [item for item in values if not (isinstance(item, str) and _REMOTE_URI.match(item))]
        if local:
            raise KubeRaySpecError(
                f"runtime_env[{key!r}] {local!r} is not a remote URI: KubeRay submits a RayJob from inside "
                "the cluster, where this worker's folders do not exist; use s3://, gs:// or https://...zip"
            )


def validate_options(options: RayJobOptions, *, selector: bool) -> None:
    """Check the options as KubeRay's controller would, and more; ``selector``: on a standing cluster."""
    for name, minimum in (
        ("ttl_seconds_after_finished", 0), ("active_deadline_seconds", 1), ("backoff_limit", 0),
        ("pre_running_deadline_seconds", 1),
    ):  # fmt: skip
        v.check_count(getattr(options, name), name, minimum=minimum)
    own = not selector and options.shutdown_after_job_finishes  # KubeRay creates and deletes the cluster
    resources = options.entrypoint_resources
    v.refuse_first(
        (not isinstance(options.entrypoint, str) or not options.entrypoint.strip(),
         "entrypoint is empty; pass a command such as 'python job.py'"),
        (options.submission_mode not in SUBMISSION_MODES,
         f"submission_mode must be one of {SUBMISSION_MODES} (K8sJobMode is the default), "
         f"got {options.submission_mode!r}"),
        (options.ttl_seconds_after_finished is not None and not own,
         "ttl_seconds_after_finished needs shutdown_after_job_finishes=True on a RayJob that creates its "
         "cluster (it is the delay before KubeRay deletes that cluster); drop it or turn shutdown on"),
        (options.suspend and not own,
         "suspend needs shutdown_after_job_finishes=True and a cluster spec (KubeRay suspends a RayJob "
         "by deleting its cluster; a standing cluster cannot be suspended)"),
        (selector and options.backoff_limit,
         "backoff_limit is not supported on a standing cluster (clusterSelector)"),
        (selector and options.submission_mode == "SidecarMode",
         "submission_mode='SidecarMode' runs the submitter beside the head of the cluster KubeRay "
         "creates; a standing cluster (clusterSelector) has no such container: use K8sJobMode or HTTPMode"),
        (options.job_id is not None and (not isinstance(options.job_id, str) or not options.job_id),
         f"job_id must be a non-empty string, got {options.job_id!r}"),
        (resources is not None and not isinstance(resources, dict),
         "entrypoint_resources must be a dict of resource name to amount"),
    )  # fmt: skip
    if options.deletion_rules is not None:
        check_deletion_rules(
            options.deletion_rules, shutdown=options.shutdown_after_job_finishes, selector=selector
        )
    amounts = {
        "entrypoint_num_cpus": options.entrypoint_num_cpus,
        "entrypoint_num_gpus": options.entrypoint_num_gpus,
    }
    amounts.update({f"entrypoint_resources[{key!r}]": amount for key, amount in (resources or {}).items()})
    for where, amount in amounts.items():
        if amount is not None and (
            isinstance(amount, bool) or not isinstance(amount, (int, float)) or not 0 <= amount < math.inf
        ):
            raise KubeRaySpecError(f"{where} must be a non-negative number, got {amount!r}")
    v.check_string_map(options.metadata, "metadata")
    _check_runtime_env(options.runtime_env)
    if options.queue_name is not None:
        v.check_labels({LABEL_KUEUE_QUEUE: options.queue_name}, "queue_name")


def check_deletion_rules(rules: Any, *, shutdown: bool, selector: bool) -> None:
    """KubeRay's ``validateDeletionRules`` (and the CRD's rules) for ``deletionStrategy.deletionRules``:
    per condition each policy at most once, TTLs not decreasing from ``DeleteWorkers`` to ``DeleteSelf``."""
    v.refuse_first(
        (shutdown, "deletion_rules and shutdown_after_job_finishes=True are mutually exclusive (KubeRay "
         "refuses the RayJob): pass shutdown_after_job_finishes=False and say when to delete the cluster "
         "with a DeleteCluster rule"),
        (not isinstance(rules, list) or not rules,
         f"deletion_rules must be a non-empty list of rules, got {rules!r}"),
    )  # fmt: skip
    ttls: dict[str, dict[str, int]] = {}
    for index, rule in enumerate(rules):
        where = f"deletion_rules[{index}]"
        if not isinstance(rule, dict) or set(rule) != {"policy", "condition"}:
            raise KubeRaySpecError(
                f"{where} must be a dict with exactly 'policy' and 'condition', e.g. "
                "{'policy': 'DeleteCluster', 'condition': {'jobStatus': 'SUCCEEDED', 'ttlSeconds': 60}}; "
                f"got {rule!r}"
            )
        policy, condition = rule["policy"], rule["condition"]
        known = isinstance(condition, dict) and set(condition) <= {*DELETION_CONDITIONS, "ttlSeconds"}
        given = [status for status in DELETION_CONDITIONS if known and status in condition]
        status = given[0] if len(given) == 1 else ""
        value, allowed = condition.get(status) if status else None, DELETION_CONDITIONS.get(status, ())
        v.refuse_first(
            (policy not in DELETION_POLICIES,
             f"{where}.policy must be one of {DELETION_POLICIES}, got {policy!r}"),
            (not known,
             f"{where}.condition takes jobStatus or jobDeploymentStatus, and ttlSeconds; got {condition!r}"),
            (not status,
             f"{where}.condition needs exactly one of jobStatus {DELETION_CONDITIONS['jobStatus']} or "
             f"jobDeploymentStatus {DELETION_CONDITIONS['jobDeploymentStatus']}, got {condition!r}"),
            (value not in allowed, f"{where}.condition.{status} must be one of {allowed}, got {value!r}"),
        )  # fmt: skip
        ttl = condition.get("ttlSeconds", 0)
        v.check_count(ttl, f"{where}.condition.ttlSeconds", minimum=0)
        if selector and policy in ("DeleteCluster", "DeleteWorkers"):
            raise KubeRaySpecError(
                f"{where}.policy {policy} is not supported on a standing cluster (clusterSelector)"
            )
        key = f"{status}={value}"
        if policy in ttls.setdefault(key, {}):
            raise KubeRaySpecError(f"{where}: a second {policy} rule for {key}")
        ttls[key][policy] = ttl
    for key, by_policy in ttls.items():
        ordered = [(p, by_policy[p]) for p in DELETION_POLICIES[:3] if p in by_policy]
        for (first, low), (then, high) in itertools.pairwise(ordered):
            if high < low:
                raise KubeRaySpecError(
                    f"deletion_rules for {key}: the {then} TTL ({high}) must be >= the {first} TTL ({low}) "
                    "(workers go first, then the cluster, then the RayJob)"
                )


def _spec_fields(options: RayJobOptions, selector: bool) -> dict[str, Any]:
    import yaml

    spec: dict[str, Any] = {
        "entrypoint": options.entrypoint.strip(),
        "submissionMode": options.submission_mode,
    }
    rules = [
        {"policy": r["policy"], "condition": {"ttlSeconds": 0, **r["condition"]}}
        for r in options.deletion_rules or ()
    ]
    optional = {
        "jobId": options.job_id,
        "metadata": dict(options.metadata),
        "runtimeEnvYAML": options.runtime_env and yaml.safe_dump(options.runtime_env, sort_keys=True),
        "entrypointNumCpus": options.entrypoint_num_cpus,
        "entrypointNumGpus": options.entrypoint_num_gpus,
        "entrypointResources": options.entrypoint_resources
        and json.dumps(options.entrypoint_resources, sort_keys=True),
        "activeDeadlineSeconds": options.active_deadline_seconds,
        "backoffLimit": options.backoff_limit,
        "preRunningDeadlineSeconds": options.pre_running_deadline_seconds,
        "deletionStrategy": rules and {"deletionRules": rules},  # KubeRay writes ttlSeconds out, default 0
    }
    spec.update({key: value for key, value in optional.items() if value not in (None, {}, [])})
    if not selector:
        spec["shutdownAfterJobFinishes"] = options.shutdown_after_job_finishes
        spec["suspend"] = options.suspend
        if options.shutdown_after_job_finishes:
            ttl = options.ttl_seconds_after_finished
            spec["ttlSecondsAfterFinished"] = DEFAULT_TTL_SECONDS if ttl is None else ttl
    return spec


def build_rayjob_body(
    options: RayJobOptions,
    *,
    name: str,
    namespace: str,
    cluster_spec: dict[str, Any] | None = None,
    cluster_name: str | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Validate and build the RayJob body (no API call).

    :param cluster_spec: the ``rayClusterSpec`` (a RayCluster body's ``spec``): KubeRay creates the cluster.
    :param cluster_name: instead, a standing RayCluster in ``namespace`` (``clusterSelector``).
    """
    if (cluster_spec is None) == (cluster_name is None):
        raise KubeRaySpecError(
            "a RayJob needs exactly one cluster: a cluster spec (spec or manifest; KubeRay creates the "
            "cluster) or a standing cluster's name (cluster; clusterSelector), "
            + ("not both" if cluster_spec is not None else "got neither")
        )
    selector = cluster_name is not None
    validate_options(options, selector=selector)
    check_name(name, "RayJob name", "rayjob")
    v.check_name(namespace, "namespace")
    spec = _spec_fields(options, selector)
    if cluster_spec is None:
        v.check_cluster_name(cluster_name, "cluster")
        spec["clusterSelector"] = {CLUSTER_SELECTOR_KEY: cluster_name}
    else:
        # A body's spec (build_body or prepare_manifest): its headGroupSpec is a mapping.
        restart = ((cluster_spec["headGroupSpec"].get("template") or {}).get("spec") or {}).get(
            "restartPolicy"
        )
        deletes_workers = any(rule.get("policy") == "DeleteWorkers" for rule in options.deletion_rules or ())
        v.refuse_first(
            ((cluster_spec.get("authOptions") or {}).get("enableK8sTokenAuth"),
             "KubeRay does not support enableK8sTokenAuth on a RayJob; use token mode"),
            (options.submission_mode == "SidecarMode" and restart not in (None, "", "Never"),
             "submission_mode='SidecarMode' needs the head pod's restartPolicy Never or unset, "
             f"got {restart!r}"),
            (cluster_spec.get("enableInTreeAutoscaling") and deletes_workers,
             "deletion_rules: DeleteWorkers is not supported with autoscaling (KubeRay refuses it); use "
             "DeleteCluster, or turn enable_autoscaling off"),
        )  # fmt: skip
        spec["rayClusterSpec"] = cluster_spec
    all_labels = dict(labels or {})
    if options.queue_name:
        all_labels[LABEL_KUEUE_QUEUE] = options.queue_name
    v.check_labels(all_labels, "labels")
    metadata = {
        "name": name,
        "namespace": namespace,
        "labels": all_labels,
        "annotations": dict(annotations or {}),
    }
    return {"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": spec}
