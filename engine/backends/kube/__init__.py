"""The Kubernetes backend: the API client, informers, leader election and the controller loop.

Only this package (and the replay backend) does I/O on the engine's side. Credentials come from
``kubernetes.config``; every request and watch goes through aiohttp client sessions (``client.KubeClient``).
"""
