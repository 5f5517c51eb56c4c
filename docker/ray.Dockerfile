# Ray 2.60 head/worker image with the provider's workloads importable inside Ray jobs
# (python -m airflow_ray_provider.workloads.evaluate / .zone_training). Build context: the repository root.
ARG RAY_VERSION=2.60.0
FROM rayproject/ray:${RAY_VERSION}

COPY --chown=ray:users setup.cfg pyproject.toml README.md /home/ray/airflow-ray-provider/
COPY --chown=ray:users airflow_ray_provider /home/ray/airflow-ray-provider/airflow_ray_provider

# --no-deps: the workloads never import Airflow, so the Ray image does not need it.
RUN pip install --no-cache-dir --no-deps /home/ray/airflow-ray-provider \
 && pip install --no-cache-dir "pandas>=2.1" "pyarrow>=14" "numpy>=1.26" "scikit-learn>=1.4" "joblib>=1.3"
