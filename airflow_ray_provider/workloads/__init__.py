"""workloads layer."""
