"""usher: a GPU batch scheduler for Kubernetes with the operator's console built in.

The import namespace is assembled by the build: ``usher.engine`` comes from the top-level
``engine/`` folder, ``usher.console`` from ``console/``, and ``usher.themes`` /
``usher.fixtures`` ship the data files. This package holds only the command line.
"""

__version__ = "0.1.0"
