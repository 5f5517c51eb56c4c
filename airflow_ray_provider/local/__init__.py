"""local layer."""
