"""``python -m airflow_ray_provider.local list | stop NAME``: see and stop this machine's local Ray heads.

For a head nothing else will stop, e.g. one started by ``airflow tasks test DAG create_cluster DATE``,
whose temporary DAG run (and so its handle) is gone once the command ends. Needs no Airflow. Exit codes:
0 stopped or listed, 2 no such head.
"""

from __future__ import annotations

import argparse
import sys

from airflow_ray_provider.local.cluster import find_cluster, list_clusters, registry_dir, stop_cluster


def main(argv: list[str] | None = None) -> int:
    """Run the command; returns the exit code."""
    parser = argparse.ArgumentParser(prog="python -m airflow_ray_provider.local", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the registered heads: name, dashboard, DAG run, expiry")
    stop = commands.add_parser("stop", help="stop the head of this name and remove its temp dir")
    stop.add_argument("name")
    args = parser.parse_args(argv)
    if args.command == "list":
        records = list_clusters()
        if not records:
            print(f"no local Ray heads registered in {registry_dir()}")
        for record in records:
            info, owner = record["info"], record.get("owner") or {}
            run = f"{owner['dag_id']}/{owner['run_id']}" if owner else "-"
            expires = record.get("expires_at") or "-"
            print(f"{info['name']}\t{info['dashboard_url']}\trun {run}\texpires {expires}")
        return 0
    info = find_cluster(args.name)
    if info is None:
        print(f"no local Ray head named {args.name!r} is running (see: python -m airflow_ray_provider.local "
              "list)", file=sys.stderr)  # fmt: skip
        return 2
    stop_cluster(info)
    print(f"stopped local Ray head {args.name} (pgid {info.pgid}); its temp dir {info.temp_dir} is removed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
