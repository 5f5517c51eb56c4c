import glob, os, subprocess
import pytest

@pytest.mark.integration
def test_diag_head_alive(ray_head):
    from airflow_ray_provider.local.head import is_running, _group_members
    alive = is_running(ray_head)
    print("ALIVE", alive, _group_members(ray_head.pgid))
    for f in sorted(glob.glob(ray_head.temp_dir + "/session_latest/logs/*"))[:80]:
        if f.endswith((".err", ".out", ".log")) and any(k in f for k in ("gcs_server", "raylet", "dashboard.", "monitor")):
            print("=====", f)
            print(open(f, errors="replace").read()[-1500:])
    print(open(ray_head.temp_dir + "/ray-start.log", errors="replace").read()[-3000:])
    assert alive
