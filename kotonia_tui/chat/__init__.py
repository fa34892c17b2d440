"""chat layer."""
