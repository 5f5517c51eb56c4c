# Stand-in for postgres:16 (no registry is reachable from CI): Debian's PostgreSQL 15 behind an
# entrypoint with the official image's contract that docker-compose.yaml relies on: POSTGRES_USER,
# POSTGRES_PASSWORD and POSTGRES_DB create the role and database on first start, data in
# /var/lib/postgresql/data, pg_isready on PATH, password auth over TCP.
ARG DEBIAN_IMAGE
FROM ${DEBIAN_IMAGE}
RUN mkdir -p /etc/postgresql-common \
 && echo "create_main_cluster = false" > /etc/postgresql-common/createcluster.conf \
 && apt-get update -qq \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends postgresql-15 >/dev/null \
 && rm -rf /var/lib/apt/lists/*
ENV PATH=/usr/lib/postgresql/15/bin:$PATH PGDATA=/var/lib/postgresql/data
COPY postgres-entrypoint.sh /usr/local/bin/docker-entrypoint.sh
VOLUME /var/lib/postgresql/data
EXPOSE 5432
ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]
CMD ["postgres"]
