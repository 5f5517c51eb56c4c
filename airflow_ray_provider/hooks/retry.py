"""Retry policy for Ray Job API calls: which failures are transient, and how to back off.

One predicate and one set of tenacity arguments serve both the sync client (requests / Ray's
``JobSubmissionClient``) and the async client (aiohttp).
"""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import aiohttp
import requests
import tenacity

from airflow_ray_provider.exceptions import RayJobAlreadyExistsError, RayJobApiError

log = logging.getLogger(__name__)

#: HTTP statuses worth retrying: rate limiting and server-side errors.
TRANSIENT_STATUS = frozenset({429})

# Ray's JobSubmissionClient raises RuntimeError("Request failed with status code 503: ...").
_SDK_STATUS = re.compile(r"status code (\d{3})")


def _status_is_transient(status: int) -> bool:
    return status in TRANSIENT_STATUS or 500 <= status < 600


def is_transient_ray_api_error(exc: BaseException) -> bool:
    """Whether a Job API failure may go away on retry.

    Transient: connection refused/reset, time-outs, HTTP 429 and 5xx. Permanent: other 4xx (bad
    request, auth, not found) and Ray's "submission id already exists" (a 500 that retrying only
    repeats; the caller re-attaches instead).
    """
    if isinstance(exc, RayJobAlreadyExistsError):
        return False
    if isinstance(exc, RayJobApiError):
        return _status_is_transient(exc.http_status)
    if isinstance(exc, aiohttp.ClientResponseError):
        return _status_is_transient(exc.status)
    transient_types = (
        requests.ConnectionError,
        requests.Timeout,
        aiohttp.ClientConnectionError,
        aiohttp.ServerTimeoutError,
        asyncio.TimeoutError,
        TimeoutError,
        ConnectionError,
    )
    if isinstance(exc, transient_types):
        return True
    if isinstance(exc, RuntimeError):
        text = str(exc)
        if "already exists" in text:
            return False
        match = _SDK_STATUS.search(text)
        return match is not None and _status_is_transient(int(match.group(1)))
    return False


def retry_kwargs(attempts: int, *, initial_wait: float = 0.5, max_wait: float = 10.0) -> dict[str, Any]:
    """Keyword arguments for ``tenacity.Retrying`` / ``tenacity.AsyncRetrying``.

    Exponential back-off with jitter, only on :func:`is_transient_ray_api_error`, logging before each
    sleep, re-raising the last error when the attempts are used up.

    :param attempts: total attempts (1 = no retry).
    :param initial_wait: first back-off in seconds.
    :param max_wait: longest back-off in seconds.
    """
    return {
        "stop": tenacity.stop_after_attempt(max(1, attempts)),
        # wait_exponential + wait_random rather than wait_exponential_jitter, whose arguments were
        # renamed between tenacity 8 and 9.
        "wait": tenacity.wait_exponential(multiplier=initial_wait, max=max_wait)
        + tenacity.wait_random(0, initial_wait),
        "retry": tenacity.retry_if_exception(is_transient_ray_api_error),
        "before_sleep": tenacity.before_sleep_log(log, logging.WARNING),
        "reraise": True,
    }
