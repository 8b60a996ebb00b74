"""The fuser: groups fusable nodes and generates ONE Numba kernel per group (see partition.py, codegen.py)."""
