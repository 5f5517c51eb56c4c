"""Pure helpers for the Ray Job REST API, shared by the sync (requests) and async (aiohttp) paths.

Routes and shapes are those of ``ray/dashboard/modules/job/job_head.py`` (Ray 2.x):
``GET /api/version``, ``GET /api/jobs/`` (list), ``GET /api/jobs/{id}``, ``POST /api/jobs/{id}/stop``
(``{"stopped": bool}``), ``GET /api/jobs/{id}/logs`` (``{"logs": str}``). A missing job is a 404; a
duplicate submission id is a 500 whose body says "already exists".

Nothing here does I/O, so the transport code of both paths is a thin shell around these functions.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from airflow_ray_provider.exceptions import RayJobAlreadyExistsError, RayJobApiError

#: Header names whose values are credentials; they are masked in logs and never shown.
SENSITIVE_HEADERS = frozenset({"authorization", "cookie", "x-api-key", "proxy-authorization"})

_BODY_LIMIT = 500


def api_url(dashboard_url: str, path: str) -> str:
    """Join the dashboard base URL and an API path (``/api/...``)."""
    return f"{dashboard_url.rstrip('/')}/{path.lstrip('/')}"


def job_path(submission_id: str, action: str = "") -> str:
    """Path of one job, optionally of an action on it (``"stop"``, ``"logs"``).

    :param submission_id: the job's submission id (URL-quoted here).
    :param action: sub-resource, or empty for the job itself.
    """
    path = f"/api/jobs/{quote(submission_id, safe='')}"
    return f"{path}/{action}" if action else path


def build_headers(token: str | None, extra: dict[str, str] | None = None) -> dict[str, str]:
    """Request headers: the user's extra headers plus ``Authorization: Bearer <token>``.

    An ``Authorization`` header given explicitly in ``extra`` wins over the token (same rule as Ray's
    own client).
    """
    headers = {str(k): str(v) for k, v in (extra or {}).items()}
    has_auth = any(k.lower() == "authorization" for k in headers)
    if token and not has_auth:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def check_response(status: int, body: str, url: str, *, allow_404: bool = False) -> bool:
    """Turn an HTTP status into a result or an exception; the one rule both transports use.

    :param status: the HTTP status code.
    :param body: the response text (quoted, truncated, in the error message).
    :param url: the URL that was called.
    :param allow_404: return ``False`` on 404 instead of raising (a job that does not exist).
    :returns: ``True`` on 2xx, ``False`` on an allowed 404.
    :raises RayJobAlreadyExistsError: on Ray's "already exists" answer to a submit.
    :raises RayJobApiError: on any other non-2xx status (the retry predicate decides on retrying).
    """
    if 200 <= status < 300:
        return True
    if status == 404 and allow_404:
        return False
    snippet = body.strip()[:_BODY_LIMIT]
    if status >= 500 and "already exists" in body:
        raise RayJobAlreadyExistsError(
            f"Ray Job API {url} answered {status}: a job with this submission id already exists",
            http_status=status,
            url=url,
        )
    hint = ""
    if status in (401, 403):
        hint = " (check the Ray auth token of the connection or cluster handle)"
    raise RayJobApiError(f"Ray Job API {url} answered {status}{hint}: {snippet}", http_status=status, url=url)


def parse_json(body: str, url: str) -> Any:
    """Parse a JSON response body, with a clear error for a non-JSON answer (e.g. a proxy page)."""
    import json

    try:
        return json.loads(body)
    except ValueError as exc:
        raise RayJobApiError(
            f"Ray Job API {url} did not answer JSON (is this a Ray dashboard URL?): {body[:200]!r}",
            http_status=200,
            url=url,
        ) from exc
