"""Telemetry sources for a cluster: scrape Prometheus text endpoints or query a Prometheus server.

``poller.TelemetryPoller`` polls the sources given with ``--telemetry`` into the controller's
``TelemetryStore``; ``exposition`` parses the Prometheus text format, ``prometheus_api`` a
Prometheus server's query answers, and ``series`` maps DCGM exporter and ``usher agent`` series
onto ``GpuSample`` records.
"""
