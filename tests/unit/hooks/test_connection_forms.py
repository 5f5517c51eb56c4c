"""The connection forms as Airflow 3's connection UI receives them (``/ui/connections/hook_meta``).

Airflow renders an extra field from its param dict: ``format: multiline`` is a text area, ``password`` a
one-line masked input, ``enum`` a dropdown labelled by ``values_display``, a ``value`` is pre-filled and
saved into every new connection, and the only in-field hint of a text field is its ``description``
(``ui-field-behaviour`` placeholders reach the standard fields only). Checked in headless Chromium
against ``airflow api-server`` once (docs/running_in_airflow.md); this test pins what the browser got.
"""

from __future__ import annotations

from typing import Any

import pytest

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def hook_meta() -> dict[str, Any]:
    from airflow.api_fastapi.core_api.services.ui.connections import HookMetaService

    return {meta.connection_type: meta for meta in HookMetaService.hook_meta_data()}


def test_kuberay_form_multiline_kubeconfig_empty_namespace_labelled_dropdown(hook_meta: dict) -> None:
    extra = hook_meta["kuberay"].extra_fields
    kube_config = extra["kube_config"]["schema"]
    assert kube_config["format"] == "multiline", "a one-line input strips the newlines of pasted YAML"
    namespace = extra["namespace"]
    assert namespace["value"] is None, "a default is written into every new connection"
    assert "default" in namespace["description"]
    auth = extra["ray_auth"]["schema"]
    assert None not in auth["enum"], "a None choice shows as a literal 'null'"
    assert set(auth["values_display"]) == set(auth["enum"]) == {"auth_options", "secret", "disabled"}
    assert "~/.kube/config" in extra["kube_config_path"]["description"]
    for name, field in extra.items():
        assert field["schema"]["title"], name
        if field["schema"]["type"][0] == "string":
            assert field["description"], f"{name}: an empty text field shows no hint without one"


def test_ray_form_hints_and_standard_placeholders(hook_meta: dict) -> None:
    meta = hook_meta["ray"]
    extra = meta.extra_fields
    assert '{"X-Org": "ml"}' in extra["headers"]["description"]
    assert '{"team": "ml-platform"}' in extra["metadata"]["description"]
    assert extra["request_timeout"]["value"] is None and "30" in extra["request_timeout"]["description"]
    assert extra["dashboard_url"]["value"] is None and "Ray job" in extra["dashboard_url"]["description"]
    assert extra["cookies"]["schema"]["format"] == "password"
    assert meta.standard_fields.host.placeholder == "http://127.0.0.1:8265"
    assert meta.standard_fields.host.title == "Dashboard URL"
    assert meta.standard_fields.login.hidden is True
