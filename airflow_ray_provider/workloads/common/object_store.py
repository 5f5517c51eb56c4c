"""Object stores checked before any work: the endpoint answers, the bucket exists, the credentials are taken.

A workload reads and writes ``s3://`` (or ``gs://``) URIs through ``pyarrow.fs``, which finds its endpoint,
region and credentials in the process's environment (``AWS_ENDPOINT_URL_S3``, ``AWS_ACCESS_KEY_ID``, ...).
Left to the work itself, a wrong endpoint costs about six seconds of retries on every file, and a refused
key surfaces as whichever read or write comes first, worded as a missing file. Here each URI field is
looked at once, before Ray starts or any data is read, with two cheap requests:

- a listing of a prefix that matches nothing (``ListObjectsV2``): unlike a ``HEAD`` request, its refusal
  carries the store's error code, so a wrong key (``INVALID_ACCESS_KEY_ID``, ``SIGNATURE_DOES_NOT_MATCH``,
  an expired token) is told apart from a key that lacks permission (``ACCESS_DENIED``);
- the bucket's own entry (``HeadBucket``): a missing bucket is ``NotFound``.

A key that lacks permission is not refused here: a least-privilege role may read its objects without
listing the bucket, and the work's own reads then say what they could not do. Messages name the config
field and the URI, never a credential: any value of the AWS credential variables in the store's answer is
masked.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Mapping

from airflow_ray_provider.workloads.common import artifacts
from airflow_ray_provider.workloads.common.errors import ArtifactError

__all__ = ["check_object_stores"]

#: The store's error codes that mean "these credentials are not accepted" (AWS SDK names and S3's own).
_REFUSED = re.compile(
    r"INVALID_ACCESS_KEY_ID|SIGNATURE_DOES_NOT_MATCH|INVALID_CLIENT_TOKEN_ID|EXPIRED_TOKEN|"
    r"InvalidAccessKeyId|SignatureDoesNotMatch|InvalidToken|ExpiredToken|UNRECOGNIZED_CLIENT"
)
#: The SDK's code (and curl's wording) for a request that never got an answer.
_UNREACHABLE = re.compile(
    r"NETWORK_CONNECTION|curlCode|Could not connect|Could not resolve|timed? ?out", re.I
)
_SECRETS = ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID")


def check_object_stores(fields: Mapping[str, str | None]) -> None:
    """Check the object store behind each remote URI, in order; local paths and ``None`` are skipped.

    :param fields: ``{config field: URI}``, e.g. ``{"data_uri": "s3://logs/dt=2026-12-01"}``.
    :raises ArtifactError: ``"<field>: ..."`` when the store cannot be reached, the bucket does not exist
        or the credentials are refused.
    """
    for field, uri in fields.items():
        if uri and "://" in uri and not uri.startswith("file://"):
            _check(field, uri)


def _check(field: str, uri: str) -> None:
    import pyarrow.fs as pafs

    try:
        fs, path = artifacts.resolve(uri)
    except ArtifactError as exc:
        raise ArtifactError(f"{field}: {exc}") from exc
    bucket = path.split("/", 1)[0]
    probe = pafs.FileSelector(f"{bucket}/.airflow-ray-check-{uuid.uuid4().hex}", allow_not_found=True)
    try:
        fs.get_file_info(probe)  # the listing: its refusal names the reason
    except artifacts.pa_errors() as exc:
        _raise_if_known(field, uri, exc)
    try:
        info = fs.get_file_info(bucket)
    except artifacts.pa_errors() as exc:
        _raise_if_known(field, uri, exc)
        return  # no permission to look at the bucket itself: the work's own reads will tell
    if info.type == pafs.FileType.NotFound:
        raise ArtifactError(
            f"{field}: the bucket {bucket!r} of {uri!r} does not exist: create it, or fix {field}"
        )


def _raise_if_known(field: str, uri: str, exc: BaseException) -> None:
    """Raise the field's one-line error for an unreachable store or refused credentials; else return."""
    reason = _masked(_reason(str(exc)))
    if _UNREACHABLE.search(str(exc)):
        endpoint = _masked(os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "")
        where = f" at {_without_userinfo(endpoint)}" if endpoint else ""
        raise ArtifactError(
            f"{field}: cannot reach the object store{where} for {uri!r} ({reason}): check the endpoint "
            f"(AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL) and that it answers from here"
        ) from exc
    if _REFUSED.search(str(exc)):
        raise ArtifactError(
            f"{field}: the object store refused the credentials for {uri!r} ({reason}): check "
            f"AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and AWS_SESSION_TOKEN (or the role) of this process"
        ) from exc


def _reason(message: str) -> str:
    """The store's words without the SDK's preamble and request id."""
    found = re.search(r"AWS Error (.*)", message)
    text = found.group(1) if found else message
    return re.sub(r"\s*\(Request ID: [^)]*\)", "", text).strip().rstrip(".")


def _masked(text: str) -> str:
    for name in _SECRETS:
        value = os.environ.get(name)
        if value and len(value) >= 4:
            text = text.replace(value, "***")
    return text


def _without_userinfo(url: str) -> str:
    return re.sub(r"//[^/@]*@", "//", url)
