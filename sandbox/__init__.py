"""The sandbox: a faithful fake Kubernetes API server and a kubelet stand-in on loopback.

It is not part of the scheduler. The kube backend's tests run against it, and users try usher's
real-cluster path with it (``usher sandbox FILE``), with ``kubectl`` beside.
"""
