"""Profiles: schema, loading, validation, the knob registry, secrets, cluster."""
