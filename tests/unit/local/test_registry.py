"""The local-head registry: reading it creates nothing; only registering a head creates its folder."""

from __future__ import annotations

import pytest

from airflow_ray_provider.cli import main
from airflow_ray_provider.clusters.local import find_cluster, list_clusters, read_record, registry_dir


@pytest.mark.unit
def test_reading_a_registry_that_does_not_exist_finds_nothing_and_creates_no_folder(local_registry, capsys):
    """A refused ``--local-cluster NAME`` (no such head) looks the name up and must leave no folder."""
    assert registry_dir() == local_registry

    assert find_cluster("no-such-head") is None
    assert read_record("no-such-head") is None
    assert list_clusters() == [] and list_clusters({"app": "x"}) == []
    assert main(["clusters", "list"]) == 0
    with pytest.raises(SystemExit) as exited:
        main(["clusters", "delete", "no-such-head"])
    assert exited.value.code == 2

    assert "no local Ray head named 'no-such-head'" in capsys.readouterr().err
    assert not local_registry.exists()
