"""Session: loading, partitioning, planning and running a model."""
