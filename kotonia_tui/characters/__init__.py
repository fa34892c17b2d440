"""characters layer."""
