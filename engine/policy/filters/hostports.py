"""Host ports as a placement feature: a pod's ``hostPort`` is a resource each node has one of.

A pod that asks for host port ``TCP/29500`` asks for one ``hostport:TCP/29500`` among its extras
(``extras.Extras``; the kube backend writes it when it reads the pod). A node lists none of them,
yet offers one of each until a pod takes it, so the only rule that differs from other extras is
what an unlisted name offers. The words for a taken port live here too, for the filter and for
the "why pending" sentence. No import of ``state``: ``state`` reads ``unlisted_offer``.
"""

from __future__ import annotations

#: extras named so are host ports (``hostport:TCP/29500``)
HOST_PORT = "hostport:"


def is_host_port(name: str) -> bool:
    return name.startswith(HOST_PORT)


def port_of(name: str) -> str:
    """``TCP/29500`` for ``hostport:TCP/29500``."""
    return name.removeprefix(HOST_PORT)


def unlisted_offer(name: str) -> int:
    """What a node offers of an extra it does not list: one of each host port, none of the rest."""
    return 1 if name.startswith(HOST_PORT) else 0


def taken(name: str) -> str:
    """The filter's words when the port is held by another pod on the node."""
    return f"{port_of(name)} taken"


def taken_everywhere(name: str) -> str:
    """The "why pending" words when a pod holds the port on every schedulable node."""
    return f"each pod also takes host port {port_of(name)}, which a pod holds on every schedulable node"
