"""``usher agent``: the node agent, one per GPU node (a DaemonSet in ``deploy/70-agent.yaml``).

It reads the node's GPUs through NVML (``usher.engine.backends.nvml``), serves what it sees on
``/metrics`` in the Prometheus text format (``metrics``), and publishes the NVLink layout and the
GPUs found unhealthy to its Node as the annotations ``usher/nvlink`` and ``usher/gpu-health``
(``publish``), which the scheduler reads. ``main`` is the command: ``--once`` prints one reading
(``--json`` for machines) and exits; without it the agent runs until stopped.
"""
