"""The job path, shared by every run, the sensor and the CLI: the one Job API client (:mod:`.client`) and
the job status it returns, submission ids and the re-attach rule, and a finished job's outcome. No Airflow
imports.
"""

from airflow_ray_provider.jobs.client import JobState, JobStatus
from airflow_ray_provider.jobs.submission import Choice, JobSpec, base_submission_id

__all__ = ["Choice", "JobSpec", "JobState", "JobStatus", "base_submission_id"]
