"""Every class path that ``get_provider_info()`` advertises to Airflow must import."""

from __future__ import annotations

import importlib

import pytest

from airflow_ray_provider import get_provider_info

INFO = get_provider_info()


def _modules(section: str) -> list[str]:
    return [module for entry in INFO[section] for module in entry["python-modules"]]


def _import_path(path: str) -> object:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


@pytest.mark.unit
@pytest.mark.parametrize(
    "module", _modules("hooks") + _modules("operators") + _modules("sensors") + _modules("triggers")
)
def test_listed_module_imports(module):
    assert importlib.import_module(module).__name__ == module


@pytest.mark.unit
@pytest.mark.parametrize("entry", INFO["connection-types"], ids=lambda e: e["connection-type"])
def test_connection_type_hook_declares_its_type(entry):
    hook_class = _import_path(entry["hook-class-name"])
    assert hook_class.conn_type == entry["connection-type"]


@pytest.mark.unit
@pytest.mark.parametrize("path", INFO["extra-links"])
def test_extra_link_classes_import(path):
    link_class = _import_path(path)
    assert isinstance(link_class.name, str) and link_class.name


@pytest.mark.unit
def test_provider_info_validates_against_airflow_schema():
    import json
    from pathlib import Path

    import airflow
    import jsonschema

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    jsonschema.validate(INFO, schema)
