"""The job path, shared by every run, the sensor and the CLI: submission ids and the re-attach rule, job
status and outcome, log streaming, and the one Job API client (:mod:`.client`, imported from its module:
it loads ``aiohttp`` and ``requests``). No Airflow imports.
"""

from airflow_ray_provider.jobs.outcome import JobState, JobStatus
from airflow_ray_provider.jobs.submission import Choice, JobSpec, base_submission_id, decide

__all__ = ["Choice", "JobSpec", "JobState", "JobStatus", "base_submission_id", "decide"]
