"""The lean private node's rules on plain classes (the real head is checked in the integration test)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_ray_provider.workloads.common.private_node import (
    LEAN_PARAMS,
    lean_node_class,
    supports_lean_node,
)

pytestmark = pytest.mark.unit


class Params:
    def __init__(self) -> None:
        self.no_monitor = False
        self.include_log_monitor: bool | None = None


class Node:
    def __init__(self, ray_params: Any, head: bool = False) -> None:
        self.seen = {name: getattr(ray_params, name) for name in LEAN_PARAMS}
        self.head = head
        self.start_api_server(include_dashboard=False, raise_on_failure=False)

    def start_api_server(self, *, include_dashboard: bool | None, raise_on_failure: bool) -> None:
        raise AssertionError("the dashboard was started")


def test_the_lean_node_sets_the_params_before_the_node_starts_and_starts_no_dashboard() -> None:
    node = lean_node_class(Node)(Params(), head=True)
    assert node.seen == {"no_monitor": True, "include_log_monitor": False}
    assert node.head is True and node._webui_url == ""
    assert isinstance(node, Node)


def test_a_ray_without_what_the_lean_node_relies_on_is_started_as_ray_starts_it() -> None:
    class OldParams:
        no_monitor = False  # no include_log_monitor

    class NodeWithoutApiServer:
        pass

    assert supports_lean_node(Node, Params)
    assert not supports_lean_node(Node, OldParams)
    assert not supports_lean_node(NodeWithoutApiServer, Params)


def test_this_environments_ray_has_what_the_lean_node_relies_on() -> None:
    import ray._private.node
    import ray._private.parameter

    assert supports_lean_node(ray._private.node.Node, ray._private.parameter.RayParams)
