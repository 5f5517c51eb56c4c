# Airflow 3.3 with airflow-ray-provider installed (build context: the repository root).
ARG AIRFLOW_VERSION=3.3.2
FROM apache/airflow:${AIRFLOW_VERSION}
ARG AIRFLOW_VERSION=3.3.2
ARG RAY_VERSION=2.60.0

COPY --chown=airflow:0 setup.cfg pyproject.toml README.md /opt/airflow-ray-provider/
COPY --chown=airflow:0 airflow_ray_provider /opt/airflow-ray-provider/airflow_ray_provider

# Pin Airflow so pip cannot up- or downgrade it, and Ray to the cluster's version (Job API client).
# The "workloads" extra lets the Airflow side read Parquet manifests; "kubernetes" enables KubeRay.
RUN pip install --no-cache-dir \
      "apache-airflow==${AIRFLOW_VERSION}" \
      "ray[default]==${RAY_VERSION}" \
      "/opt/airflow-ray-provider[kubernetes,workloads]"
