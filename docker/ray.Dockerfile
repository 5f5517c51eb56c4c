# Ray head/worker image with the provider's workloads importable inside Ray jobs
# (python -m airflow_ray_provider.workloads.evaluate / .zone_training). Build context: the repository root.
# RAY_BASE_IMAGE: the official image by default; tests/compose builds a stand-in with the same contract
# (user ray, group users, home /home/ray, Ray and pip on PATH).
ARG RAY_BASE_IMAGE=rayproject/ray:2.60.0-py311
FROM ${RAY_BASE_IMAGE}

# The workloads' libraries at the repo lock's versions (the ones the tests run); the workloads never
# import Airflow, so the provider itself goes in with --no-deps.
COPY --chown=ray:users requirements.lock /home/ray/airflow-ray-provider/requirements.lock
RUN pip install --no-cache-dir -c /home/ray/airflow-ray-provider/requirements.lock \
      pandas pyarrow numpy scikit-learn joblib

COPY --chown=ray:users setup.cfg pyproject.toml README.md LICENSE /home/ray/airflow-ray-provider/
COPY --chown=ray:users airflow_ray_provider /home/ray/airflow-ray-provider/airflow_ray_provider
RUN pip install --no-cache-dir --no-deps /home/ray/airflow-ray-provider \
 && python -c "import airflow_ray_provider.workloads.evaluate, airflow_ray_provider.workloads.zone_training"
