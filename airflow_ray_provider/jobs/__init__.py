"""Pure rules of the Ray job path, shared by every run, the sensor and the CLI.

Submission ids and the re-attach rule (:mod:`.submission`, :mod:`.reattach`), the job status type
(:mod:`.status`), the job outcome (:mod:`.outcome`), log streaming by offset (:mod:`.logs`) and the one
Job API client (:mod:`.client`, imported from its module: it loads ``aiohttp`` and ``requests``).
No Airflow hook here.
"""

from airflow_ray_provider.jobs.reattach import Choice, decide
from airflow_ray_provider.jobs.status import JobState, JobStatus
from airflow_ray_provider.jobs.submission import JobSpec, base_submission_id

__all__ = ["Choice", "JobSpec", "JobState", "JobStatus", "base_submission_id", "decide"]
