"""templates layer."""
