# Stand-in for apache/airflow:3.3.2-python3.11 (no registry is reachable from CI): Debian's Python 3.11,
# Airflow at the repo lock's version with the Postgres provider, and the parts of the official image's
# contract that docker/airflow.Dockerfile and docker-compose.yaml rely on: user airflow (50000, group 0),
# AIRFLOW_HOME=/opt/airflow, pip on PATH for that user, curl, and /entrypoint behind dumb-init.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ARG AIRFLOW_VERSION=3.3.2
# The build reaches PyPI through the host's TLS setup: its CA bundle, kept for the image built on top.
COPY host-ca.crt /etc/ssl/certs/host-ca.crt
ENV PIP_CERT=/etc/ssl/certs/host-ca.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 AIRFLOW_HOME=/opt/airflow PATH=/home/airflow/.local/bin:$PATH
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv curl dumb-init procps >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 50000 --gid 0 --home-dir /home/airflow --create-home airflow \
 && mkdir -p /opt/airflow/dags /opt/airflow/logs && chown -R airflow:0 /opt/airflow && chmod -R g+w /opt/airflow
COPY requirements.lock /tmp/requirements.lock
COPY airflow-entrypoint.sh /entrypoint
USER airflow
RUN python3 -m venv /home/airflow/.local \
 && pip install --no-cache-dir -q uv \
 && uv pip install --no-cache -q --python /home/airflow/.local/bin/python -c /tmp/requirements.lock \
      "apache-airflow[postgres]==${AIRFLOW_VERSION}" \
 && airflow version
WORKDIR /opt/airflow
ENTRYPOINT ["/usr/bin/dumb-init", "--", "/entrypoint"]
CMD []
