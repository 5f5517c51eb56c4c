# Stand-in for rayproject/ray:2.60.0-py311 (no registry is reachable from CI): Debian's Python 3.11 with
# Ray at the repo lock's version, and the parts of the official image's contract docker/ray.Dockerfile
# and docker-compose.yaml rely on: user ray (1000, group users), home /home/ray, python/pip/ray on PATH.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
ARG RAY_VERSION=2.60.0
COPY host-ca.crt /etc/ssl/certs/host-ca.crt
ENV PIP_CERT=/etc/ssl/certs/host-ca.crt SSL_CERT_FILE=/etc/ssl/certs/host-ca.crt \
    PIP_DISABLE_PIP_VERSION_CHECK=1 PATH=/home/ray/venv/bin:$PATH
RUN apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      python3 python3-venv procps >/dev/null \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 1000 --gid users --home-dir /home/ray --create-home --shell /bin/bash ray
COPY requirements.lock /tmp/requirements.lock
USER ray
WORKDIR /home/ray
RUN python3 -m venv /home/ray/venv \
 && pip install --no-cache-dir -q uv \
 && uv pip install --no-cache -q --python /home/ray/venv/bin/python -c /tmp/requirements.lock \
      "ray[default]==${RAY_VERSION}" \
 && ray --version
CMD ["bash"]
