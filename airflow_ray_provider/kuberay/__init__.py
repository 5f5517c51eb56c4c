"""KubeRay client layer: RayCluster CRs over the official ``kubernetes`` client. Never imports Airflow.

Import from the submodules (``kuberay.client``, ``kuberay.spec``, ``kuberay.builder``, ``kuberay.status``);
this package file stays import-light so that DAG parsing does not load ``kubernetes``.
"""
