"""Pure rules of the Ray job path, shared by every run, the sensor and the CLI.

Submission ids and the re-attach rule (:mod:`.submission`), the job status type (:mod:`.status`), the job
outcome and log streaming by offset (:mod:`.outcome`), and the one Job API client (:mod:`.client`,
imported from its module: it loads ``aiohttp`` and ``requests``). No Airflow hook here.
"""

from airflow_ray_provider.jobs.status import JobState, JobStatus
from airflow_ray_provider.jobs.submission import Choice, JobSpec, base_submission_id, decide

__all__ = ["Choice", "JobSpec", "JobState", "JobStatus", "base_submission_id", "decide"]
