# Airflow 3.3 with airflow-ray-provider installed (build context: the repository root).
# AIRFLOW_BASE_IMAGE: the official image by default; tests/compose builds a stand-in with the same
# contract (user airflow 50000:0, AIRFLOW_HOME=/opt/airflow, pip on PATH, /entrypoint).
ARG AIRFLOW_BASE_IMAGE=apache/airflow:3.3.2-python3.11
FROM ${AIRFLOW_BASE_IMAGE}
ARG AIRFLOW_VERSION=3.3.2

# Dependencies first (a layer that survives edits of the provider's code), pinned by the repo's lock:
# the versions the test suite runs against. Airflow itself is pinned so pip cannot move it.
# setup.cfg reads the version from the package's __init__.py, so that one file comes with the metadata.
COPY --chown=airflow:0 setup.cfg pyproject.toml README.md LICENSE requirements.lock /opt/airflow-ray-provider/
COPY --chown=airflow:0 airflow_ray_provider/__init__.py /opt/airflow-ray-provider/airflow_ray_provider/
RUN pip install --no-cache-dir -c /opt/airflow-ray-provider/requirements.lock \
      "apache-airflow==${AIRFLOW_VERSION}" "/opt/airflow-ray-provider[kubernetes,workloads]"

COPY --chown=airflow:0 airflow_ray_provider /opt/airflow-ray-provider/airflow_ray_provider
RUN pip install --no-cache-dir --no-deps --force-reinstall /opt/airflow-ray-provider \
 && python -c "import airflow_ray_provider.operators, airflow_ray_provider.workloads"
