"""The dashboard's read-only HTTP API of one cluster: the reads a usage record is made of.

Plain HTTP with the cluster's token (``Authorization: Bearer``); no Airflow imports, no Ray process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from airflow_ray_provider.launch.usage.record import Node

#: The state API's largest page (``RAY_MAX_LIMIT_FROM_API_SERVER``'s default).
STATE_LIMIT = 10_000


def cut_note(route: str, data: dict[str, Any], returned: int) -> str | None:
    """What a state API list left out, from its counts; ``None`` when it returned every matching row.

    Ray counts a list in stages (``ListApiResponse``): ``total`` rows in the cluster, of all jobs;
    ``num_after_truncation`` after the data source's cut (for tasks, ``total`` also holds the task
    events Ray dropped); ``num_filtered`` after the filters; then the ``limit``. A filter (``job_id``)
    is not a cut: ``total`` above the rows returned says nothing on its own.
    """
    total = int(data.get("total") or 0)
    kept = int(data.get("num_after_truncation", total) or 0)
    matched = int(data.get("num_filtered", returned) or 0)
    notes = []
    if matched > returned:
        notes.append(f"{route} listed {returned} of the {matched} matching rows (its limit)")
    if total > kept:
        notes.append(f"{route}'s source kept {kept} of {total} rows (cut there, or events Ray dropped)")
    return "; ".join(notes) or None


class StateUnreadableError(RuntimeError):
    """The dashboard did not answer one read (the record names it; the job goes on)."""


@dataclass
class DashboardState:
    """The dashboard's read-only state API of one cluster.

    :param dashboard_url: e.g. ``http://127.0.0.1:8265``.
    :param headers: request headers, ``Authorization: Bearer <token>`` included.
    :param cookies: cookies.
    :param verify: TLS verification (a CA bundle path or a bool).
    :param timeout: seconds per request (short: a slow dashboard costs the record, not the job).
    """

    dashboard_url: str
    headers: dict[str, str] = field(default_factory=dict, repr=False)
    cookies: dict[str, str] = field(default_factory=dict, repr=False)
    verify: bool | str = True
    timeout: float = 5.0

    def get(self, path: str) -> Any:
        """``GET`` a dashboard path; the JSON body.

        :raises StateUnreadableError: on no answer, a non-2xx status or a body that is not JSON.
        """
        import requests

        url = f"{self.dashboard_url.rstrip('/')}{path}"
        try:
            resp = requests.get(  # one request per call: the reads run in parallel threads
                url, headers=self.headers, cookies=self.cookies, verify=self.verify, timeout=self.timeout
            )
        except Exception as exc:
            raise StateUnreadableError(f"{path.split('?')[0]} did not answer: {type(exc).__name__}") from exc
        if not 200 <= resp.status_code < 300:
            raise StateUnreadableError(f"{path.split('?')[0]} answered HTTP {resp.status_code}")
        try:
            return resp.json()
        except ValueError as exc:
            raise StateUnreadableError(f"{path.split('?')[0]} answered something that is not JSON") from exc

    def _list(self, route: str, **filters: str) -> tuple[list[dict[str, Any]], str | None]:
        query: list[tuple[str, str]] = [("detail", "true"), ("limit", str(STATE_LIMIT))]
        for key, value in filters.items():
            query += [("filter_keys", key), ("filter_predicates", "="), ("filter_values", value)]
        body = self.get(f"{route}?{urlencode(query)}")
        data = ((body or {}).get("data") or {}).get("result") or {}
        if not (body or {}).get("result", True) or "result" not in data:
            raise StateUnreadableError(f"{route} answered without a result: {(body or {}).get('msg')}")
        rows = list(data["result"])
        return rows, cut_note(route, data, len(rows))

    def job(self, submission_id: str) -> dict[str, Any]:
        """The Job API's details of the job."""
        return dict(self.get(f"/api/jobs/{quote(submission_id, safe='')}") or {})

    def nodes(self) -> list[Node]:
        """The cluster's nodes (alive and dead) with their resources and up times."""
        rows, _ = self._list("/api/v0/nodes")
        return [Node.from_state(row) for row in rows]

    def tasks(self, ray_job_id: str) -> tuple[list[dict[str, Any]], str | None]:
        """The job's task attempts, and a note when the list was cut."""
        return self._list("/api/v0/tasks", job_id=ray_job_id)

    def actors_named(self, name: str) -> list[dict[str, Any]]:
        """The state API's actors of this name (from the GCS: ``actor_id``, ``name``, ``class_name``)."""
        rows, _ = self._list("/api/v0/actors", name=name)
        return rows

    def job_actors(self, ray_job_id: str) -> tuple[list[dict[str, Any]], str | None]:
        """The state API's actors of the job (from the GCS: ``job_id``, ``class_name``,
        ``required_resources``, ``state``; no times), and a note when the list was cut."""
        return self._list("/api/v0/actors", job_id=ray_job_id)

    def actors(self) -> list[dict[str, Any]]:
        """Every actor the dashboard keeps, with ``startTime``/``endTime`` (ms) and lifetime resources.

        ``nocache=1``: the dashboard otherwise answers this route from a 2 s cache, which a job that ended
        within 2 s of an earlier read is missing from (its supervisor, hence ``queued_s``, not found)."""
        body = self.get("/logical/actors?nocache=1")
        return list((((body or {}).get("data") or {}).get("actors") or {}).values())
