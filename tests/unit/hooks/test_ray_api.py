"""Pure Job API helpers and the retry policy shared by the sync and async transports."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
import requests
import tenacity

from airflow_ray_provider.exceptions import RayJobAlreadyExistsError, RayJobApiError
from airflow_ray_provider.hooks.ray_api import (
    api_url,
    build_headers,
    check_response,
    job_path,
    parse_json,
)
from airflow_ray_provider.hooks.retry import is_transient_ray_api_error, retry_kwargs
from airflow_ray_provider.jobs.outcome import dashboard_job_url

pytestmark = pytest.mark.unit


def test_urls():
    assert api_url("http://h:8265/", "/api/jobs/") == "http://h:8265/api/jobs/"
    assert job_path("a b/c") == "/api/jobs/a%20b%2Fc"
    assert job_path("s-1", "logs") == "/api/jobs/s-1/logs"
    assert dashboard_job_url("https://h/ray/", "s-1") == "https://h/ray/#/jobs/s-1"


def test_headers_add_bearer_token_unless_authorization_is_given():
    assert build_headers("t0k", {"X-Org": "ml"}) == {"X-Org": "ml", "Authorization": "Bearer t0k"}
    assert build_headers("t0k", {"authorization": "Basic abc"}) == {"authorization": "Basic abc"}
    assert build_headers(None) == {}


def test_check_response():
    assert check_response(200, "{}", "u") is True
    assert check_response(404, "no", "u", allow_404=True) is False
    with pytest.raises(RayJobApiError) as excinfo:
        check_response(404, "Job x does not exist", "http://h/api/jobs/x")
    assert excinfo.value.http_status == 404 and "http://h/api/jobs/x" in str(excinfo.value)
    with pytest.raises(RayJobApiError, match="auth token"):
        check_response(401, "Unauthorized", "u")
    with pytest.raises(RayJobAlreadyExistsError):
        check_response(500, "Job with submission_id s already exists. Please use a different one", "u")
    with pytest.raises(RayJobApiError, match="JSON"):
        parse_json("<html>login</html>", "u")


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
    assert is_transient_ray_api_error(exc) is transient


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
    kwargs = retry_kwargs(5, initial_wait=0.01, max_wait=0.02)
    assert tenacity.Retrying(**kwargs)(call) == "ok" and len(calls) == 3


def test_retry_policy_does_not_retry_permanent_and_reraises_the_last_error():
    call, calls = _counting([RayJobApiError("nope", http_status=403, url="u")])
    with pytest.raises(RayJobApiError, match="nope"):
        tenacity.Retrying(**retry_kwargs(5, initial_wait=0.01))(call)
    assert len(calls) == 1
    call, calls = _counting([requests.ConnectionError("down")] * 10)
    with pytest.raises(requests.ConnectionError):
        tenacity.Retrying(**retry_kwargs(3, initial_wait=0.01, max_wait=0.01))(call)
    assert len(calls) == 3


def test_retry_policy_works_for_coroutines():
    attempts = []

    async def call():
        attempts.append(1)
        if len(attempts) < 2:
            raise aiohttp.ClientConnectionError("down")
        return "ok"

    async def main():
        return await tenacity.AsyncRetrying(**retry_kwargs(3, initial_wait=0.01))(call)

    assert asyncio.run(main()) == "ok" and len(attempts) == 2
