"""The node agent's window on the GPUs: NVML through nvidia-ml-py (``import pynvml``).

``reader.NvmlReader`` is the only code that talks to the driver; it returns plain records
(``NodeReading``, ``GpuReading``) in base units, with ``None`` wherever the driver lacks a
function or a GPU does not support it (shown as N/A, never a crash). ``layout`` turns which GPUs
are linked into NVLink islands, ``health`` decides whether a GPU is fit for work. ``usher agent``
(``usher.agent``) prints, serves and publishes what the reader sees.
"""
