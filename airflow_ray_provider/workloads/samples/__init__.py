"""Synthetic data for demos, templates, tests and benchmarks: a click log with two models, and zone data."""

from airflow_ray_provider.workloads.samples.click_log import make_eval_dataset, make_frame, make_models
from airflow_ray_provider.workloads.samples.zones import make_zone_dataset

__all__ = ["make_eval_dataset", "make_frame", "make_models", "make_zone_dataset"]
