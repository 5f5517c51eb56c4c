#!/usr/bin/env bash
# Stand-in for the official Airflow image's /entrypoint, the part docker-compose.yaml uses:
# _AIRFLOW_DB_MIGRATE=true migrates the database first; "bash"/"python" run as given, anything else is
# an airflow subcommand ("api-server", "scheduler", ...).
set -euo pipefail
if [[ "${_AIRFLOW_DB_MIGRATE:-}" == "true" ]]; then
  airflow db migrate
fi
case "${1:-bash}" in
  bash | python | python3 | sh) exec "${@:-bash}" ;;
  airflow) exec "$@" ;;
  *) exec airflow "$@" ;;
esac
