"""Pure Job API helpers and the retry policy shared by the sync and async transports."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
import requests
import tenacity

from airflow_ray_provider.exceptions import RayJobAlreadyExistsError, RayJobApiError
from airflow_ray_provider.jobs.client import JobClient, http_status, is_transient, retry_policy
from airflow_ray_provider.jobs.outcome import dashboard_job_url

pytestmark = pytest.mark.unit


def test_job_page_url():
    assert dashboard_job_url("https://h/ray/", "s-1") == "https://h/ray/#/jobs/s-1"


def test_headers_add_bearer_token_unless_authorization_is_given():
    def auth_headers(token: str | None, headers: dict[str, str] | None = None) -> dict[str, str]:
        return JobClient("http://h:8265/", token=token, headers=headers or {}).headers

    assert auth_headers("t0k", {"X-Org": "ml"}) == {"X-Org": "ml", "Authorization": "Bearer t0k"}
    assert auth_headers("t0k", {"authorization": "Basic abc"}) == {"authorization": "Basic abc"}
    assert auth_headers(None) == {}
    reader = JobClient("http://h:8265/", token="t0k", timeout=60).reader()
    assert (reader.address, reader.source, reader.timeout, reader.retry_attempts) == (
        "http://h:8265", "http://h:8265", 10.0, 1,
    )  # fmt: skip
    assert reader.headers == {"Authorization": "Bearer t0k"} and "t0k" not in repr(reader)


def test_the_status_of_each_kind_of_failure_is_read_one_way():
    assert http_status(RayJobApiError("x", http_status=404, url="u")) == 404
    assert http_status(RuntimeError("Request failed with status code 404: Job x does not exist.")) == 404
    assert http_status(aiohttp.ClientResponseError(None, (), status=503)) == 503  # type: ignore[arg-type]
    assert http_status(requests.ConnectionError("refused")) is None


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (RayJobApiError("x", http_status=429, url="u"), True),
        (RayJobApiError("x", http_status=500, url="u"), True),
        (RayJobApiError("x", http_status=503, url="u"), True),
        (RayJobApiError("x", http_status=400, url="u"), False),
        (RayJobApiError("x", http_status=401, url="u"), False),
        (RayJobApiError("x", http_status=404, url="u"), False),
        (RayJobAlreadyExistsError("x", http_status=500, url="u"), False),
        (requests.ConnectionError("refused"), True),
        (requests.Timeout("slow"), True),
        (ConnectionRefusedError(111, "refused"), True),
        (ConnectionError("Failed to connect to Ray at address: http://h"), True),
        (aiohttp.ClientConnectionError("refused"), True),
        (asyncio.TimeoutError(), True),
        (RuntimeError("Request failed with status code 503: busy."), True),
        (RuntimeError("Request failed with status code 400: bad."), False),
        (RuntimeError("Request failed with status code 500: Job with submission_id x already exists"), False),
        (ValueError("bad runtime_env"), False),
        (KeyError("x"), False),
    ],
)
def test_transient_predicate(exc, transient):
    assert is_transient(exc) is transient


def _counting(errors):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return "ok"

    return call, calls


def test_retry_policy_retries_transient_then_succeeds():
    call, calls = _counting([requests.ConnectionError("a"), RayJobApiError("b", http_status=502, url="u")])
    kwargs = retry_policy(5, max_wait=0.02)
    assert tenacity.Retrying(**kwargs)(call) == "ok" and len(calls) == 3


def test_retry_policy_does_not_retry_permanent_and_reraises_the_last_error():
    call, calls = _counting([RayJobApiError("nope", http_status=403, url="u")])
    with pytest.raises(RayJobApiError, match="nope"):
        tenacity.Retrying(**retry_policy(5, max_wait=0.01))(call)
    assert len(calls) == 1
    call, calls = _counting([requests.ConnectionError("down")] * 10)
    with pytest.raises(requests.ConnectionError):
        tenacity.Retrying(**retry_policy(3, max_wait=0.01))(call)
    assert len(calls) == 3


def test_retry_policy_works_for_coroutines():
    attempts = []

    async def call():
        attempts.append(1)
        if len(attempts) < 2:
            raise aiohttp.ClientConnectionError("down")
        return "ok"

    async def main():
        return await tenacity.AsyncRetrying(**retry_policy(3, max_wait=0.01))(call)

    assert asyncio.run(main()) == "ok" and len(attempts) == 2
