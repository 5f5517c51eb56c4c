"""kuberay layer."""
