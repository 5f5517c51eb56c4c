"""The cluster handle: the one contract between the create-cluster task and everything downstream, a
plain dict in XCom that *refers* to the Ray auth token (a 0600 file, a Kubernetes Secret), never holds it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal, get_args

from airflow_ray_provider.exceptions import RayInvalidInputError

#: The cluster backends: an ephemeral local Ray head, or a KubeRay RayCluster.
BackendName = Literal["local", "kuberay"]
BACKENDS: tuple[BackendName, ...] = get_args(BackendName)


#: ``extra`` key of a handle: the dashboard's address for people, when it differs from Airflow's.
EXTRA_LINK_URL = "link_url"


@dataclass(frozen=True)
class RayClusterHandle:
    """Where a Ray cluster's dashboard (Job API) is and where its token is: a 0600 ``auth_token_file``
    (local), or the Kubernetes ``auth_token_secret`` read through ``conn_id``; ``extra``: details safe to
    show (pid, temp dir, ...). An unowned cluster (attached, or a RayJob's) is never deleted through it."""

    backend: BackendName
    name: str
    dashboard_url: str
    namespace: str | None = None
    auth_token_file: str | None = None
    auth_token_secret: str | None = None
    auth_token_secret_key: str | None = None
    conn_id: str | None = None
    extra: dict[str, Any] | None = None
    owned: bool = True

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise RayInvalidInputError(
                f"cluster handle backend must be one of {BACKENDS}, got {self.backend!r}"
            )
        if not self.name:
            raise RayInvalidInputError("cluster handle has an empty name")
        if not self.dashboard_url.startswith(("http://", "https://")):
            raise RayInvalidInputError(
                f"cluster handle dashboard_url must start with http:// or https://, "
                f"got {self.dashboard_url!r}"
            )

    @property
    def link_url(self) -> str:
        """The dashboard as a person's browser reaches it (extra links): ``extra["link_url"]`` when the
        cluster connection gives one (an ingress), else :attr:`dashboard_url` (how Airflow reaches it)."""
        return str((self.extra or {}).get(EXTRA_LINK_URL) or self.dashboard_url)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-serialisable dict for XCom."""
        return asdict(self)

    @classmethod
    def from_dict(cls, value: Any) -> RayClusterHandle:
        """A handle from an XCom value (or the handle itself); RayInvalidInputError if not one."""
        if isinstance(value, RayClusterHandle):
            return value
        if not isinstance(value, dict):
            raise RayInvalidInputError(
                "expected a cluster handle (the XCom of CreateRayClusterOperator, a dict with "
                f"backend, name and dashboard_url), got {type(value).__name__}"
            )
        missing = {"backend", "name", "dashboard_url"} - value.keys()
        if missing:
            raise RayInvalidInputError(
                f"cluster handle is missing {sorted(missing)}; pass the XCom of "
                "CreateRayClusterOperator (e.g. create_cluster.output)"
            )
        unknown = set(value) - set(cls.__dataclass_fields__)
        if unknown:
            raise RayInvalidInputError(f"cluster handle has unknown keys {sorted(unknown)}")
        return cls(**value)
