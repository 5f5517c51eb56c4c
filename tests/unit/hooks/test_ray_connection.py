"""The ``ray`` connection type: parsing, UI form metadata, secrets kept out of reprs, lazy hook."""

from __future__ import annotations

import json

import pytest

from airflow_ray_provider.connection_forms import RAY_CONNECTION_TYPE
from airflow_ray_provider.exceptions import RayInvalidInputError
from airflow_ray_provider.hooks.ray_job import RayJobHook
from tests.fixtures.ray_job import drop_connection, set_connection

pytestmark = pytest.mark.unit
TOKEN = "tok-0123456789abcdef0123456789"
CONN_FIELDS = RAY_CONNECTION_TYPE["conn-fields"]
UI_FIELD_BEHAVIOUR = RAY_CONNECTION_TYPE["ui-field-behaviour"]


def client_of_connection(**fields):
    """The client of a ``ray`` connection ``c1`` with these fields (defined through the environment)."""
    set_connection("c1", **fields)
    try:
        return RayJobHook("c1").client
    finally:
        drop_connection("c1")


def test_full_url_host_token_and_extras():
    extra = {
        "headers": json.dumps({"X-Org": "ml"}),
        "cookies": {"session": "ck-secret-value"},
        "verify": "false",
        "metadata": {"team": "ml"},
        "request_timeout": "7",
    }
    client = client_of_connection(host="https://ray.example:8443/", password=TOKEN, extra=extra)
    assert client.address == "https://ray.example:8443"
    assert client.headers == {"X-Org": "ml", "Authorization": f"Bearer {TOKEN}"}
    assert client.cookies == {"session": "ck-secret-value"}
    assert client.verify is False and client.metadata == {"team": "ml"} and client.timeout == 7
    assert {TOKEN, "ck-secret-value"} <= set(client.secrets())
    assert TOKEN not in repr(client) and "ck-secret-value" not in repr(client)


def test_host_port_schema_and_ca_bundle():
    client = client_of_connection(host="head", port=8265, schema="https", extra={"ca_bundle": "/ca.pem"})
    assert client.address == "https://head:8265" and client.verify == "/ca.pem" and client.headers == {}


@pytest.mark.parametrize(
    ("fields", "match"),
    [({"host": ""}, "no Host"), ({"host": "h", "extra": {"headers": "{not json"}}, "not valid JSON")],
)
def test_bad_connection_is_rejected(fields, match):
    with pytest.raises(RayInvalidInputError, match=match):
        client_of_connection(**fields)


def test_ui_metadata_is_consistent():
    import json
    from pathlib import Path

    import airflow
    import jsonschema

    behaviour = {key.replace("-", "_"): value for key, value in UI_FIELD_BEHAVIOUR.items()}
    schema = Path(airflow.__file__).parent / "customized_form_field_behaviours.schema.json"
    jsonschema.validate(behaviour, json.loads(schema.read_text()))
    assert behaviour["relabeling"]["host"] == "Dashboard URL"
    assert "login" in behaviour["hidden_fields"]
    assert set(UI_FIELD_BEHAVIOUR["placeholders"]) <= {"host", "password", *CONN_FIELDS}
    assert CONN_FIELDS["cookies"]["schema"]["format"] == "password"  # masked in the UI
    for spec in CONN_FIELDS.values():
        assert spec["label"] and "type" in spec["schema"]


def test_hook_init_does_no_io_and_unknown_connection_is_a_clear_error():
    hook = RayJobHook("no_such_conn_xyz")  # nothing resolved yet
    with pytest.raises(RayInvalidInputError, match=r"no_such_conn_xyz.*not defined"):
        hook.client  # noqa: B018


def test_hook_reads_env_connection_and_masks_its_secrets():
    from airflow.sdk.log import redact

    set_connection(
        "ray_unit_mask",
        host="http://127.0.0.1:1",
        password=TOKEN,
        extra={"cookies": {"s": "cookie-0123456789"}},
    )
    try:
        client = RayJobHook("ray_unit_mask").client
    finally:
        drop_connection("ray_unit_mask")
    assert client.headers["Authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in redact(f"x {TOKEN} y") and "cookie-0123456789" not in redact("c=cookie-0123456789")


def test_connection_type_entry_validates_against_airflow_provider_schema():
    import json
    from pathlib import Path

    import airflow
    import jsonschema

    from airflow_ray_provider import get_provider_info

    info = get_provider_info()
    others = [c for c in info["connection-types"] if c["connection-type"] != "ray"]
    info["connection-types"] = [RAY_CONNECTION_TYPE, *others]
    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(info, schema)
