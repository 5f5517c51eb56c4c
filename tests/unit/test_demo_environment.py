"""``make demo``'s environment: no "empty cryptography key" warning, and a key that survives reruns."""

from __future__ import annotations

import os
import stat

import pytest

pytestmark = pytest.mark.unit


def test_the_demo_sets_a_kept_fernet_key(tmp_path, monkeypatch):
    from cryptography.fernet import Fernet

    from airflow_ray_provider.demo import configure_environment

    # configure_environment edits os.environ: give it a private copy without the keys it sets
    ours = ("AIRFLOW_HOME", "AIRFLOW__CORE__FERNET_KEY", "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN")
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k not in ours})
    configure_environment(tmp_path, 1000, verbose=False)
    first = os.environ["AIRFLOW__CORE__FERNET_KEY"]
    Fernet(first.encode())  # a valid key (an empty one made Airflow warn and store values unencrypted)
    assert stat.S_IMODE((tmp_path / ".airflow" / "fernet.key").stat().st_mode) == 0o600

    del os.environ["AIRFLOW__CORE__FERNET_KEY"]
    configure_environment(tmp_path, 1000, verbose=False)
    assert os.environ["AIRFLOW__CORE__FERNET_KEY"] == first  # a rerun reads what the first run stored
