"""The object-store check's rules that need no store: which URIs it looks at, and what its messages hide.

The check against a real S3 API (moto's server) is in ``tests/integration/storage/test_workloads_on_s3.py``.
"""

from __future__ import annotations

import pytest

from airflow_ray_provider.workloads.common import object_store
from airflow_ray_provider.workloads.common.errors import ArtifactError

pytestmark = pytest.mark.unit


def test_local_paths_file_uris_and_missing_fields_are_not_looked_at(monkeypatch):
    looked = []
    monkeypatch.setattr(object_store, "_check", lambda field, uri: looked.append(field))
    object_store.check_object_stores(
        {
            "data_uri": "/data/x",
            "output_uri": "file:///out",
            "--only-failed": None,
            "models.a.uri": "s3://b/m",
        }
    )
    assert looked == ["models.a.uri"]


def test_an_unsupported_scheme_names_the_field():
    with pytest.raises(ArtifactError, match=r"^data_uri: cannot open 'nosuch://b/x'"):
        object_store.check_object_stores({"data_uri": "nosuch://b/x"})


def test_refused_credentials_name_the_variables_but_never_their_values(monkeypatch):
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t-value")
    answer = OSError(
        "When listing objects under key 'p/' in bucket 'b': AWS Error SIGNATURE_DOES_NOT_MATCH during "
        "ListObjectsV2 operation: key AKIAEXAMPLEKEY signed with s3cr3t-value (Request ID: abc123)"
    )
    with pytest.raises(ArtifactError) as caught:
        object_store._raise_if_known("output_uri", "s3://b/out", answer)
    message = str(caught.value)
    assert message.startswith("output_uri: the object store refused the credentials for 's3://b/out'")
    assert "AWS_SECRET_ACCESS_KEY" in message and "SIGNATURE_DOES_NOT_MATCH" in message
    assert "AKIAEXAMPLEKEY" not in message and "s3cr3t-value" not in message and "abc123" not in message


def test_an_unreachable_endpoint_names_it_without_its_userinfo(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://user:pw@127.0.0.1:9")
    answer = OSError(
        "AWS Error NETWORK_CONNECTION during HeadBucket operation: curlCode: 7, Could not connect"
    )
    with pytest.raises(
        ArtifactError, match=r"^data_uri: cannot reach the object store at http://127\.0\.0\.1:9 "
    ):
        object_store._raise_if_known("data_uri", "s3://b/x", answer)


def test_a_key_without_permission_is_left_to_the_work():
    answer = OSError("AWS Error ACCESS_DENIED during HeadBucket operation: No response body.")
    object_store._raise_if_known("data_uri", "s3://b/x", answer)  # no error: a role may read, not list
