"""The suite's CPU accounting: a cgroup charges a test with the CPU of every process it starts."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from tests.fixtures.cpu_time import join, own_cgroup, remove, usage_seconds

pytestmark = pytest.mark.unit

BUSY = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass"


def test_a_cgroup_counts_a_child_process_and_is_removed_once_it_ended():
    home = own_cgroup()
    if home is None:
        pytest.skip("no writable cgroup v1 cpuacct controller on this machine")
    group = home / f"arp-unit-{uuid.uuid4().hex[:8]}"
    group.mkdir()
    try:
        join(group)
        try:
            # Started by Popen inside the group, reaped by nobody in particular: still counted.
            sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
            subprocess.run([sys.executable, "-c", BUSY], check=True)
        finally:
            join(home)
        assert usage_seconds(group) >= 0.3
        assert remove(group) == [group]  # the sleeper still runs in it: named, not removed
        sleeper.kill()
        sleeper.wait()
        assert remove(group) == [] and not group.exists()
    finally:
        if group.exists():
            remove(group)
