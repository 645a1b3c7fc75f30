"""Extras as a placement feature: what a pod asks of its node beyond GPUs, CPU and memory.

A cluster's extended resources (``rdma/ib``), hugepages, ephemeral storage, the pod count
(``PODS``) and host ports (``hostports``) are all one kind of thing to the engine: named amounts a
node offers (``Node.extra``) and has left (``Node.extra_free``). ``ExtraFit`` is the filter;
``extra_offered`` the accounting rule ``state`` uses when it takes and gives back. Typed by
structure, not by ``state``'s records, since ``state`` imports this module.
"""

from __future__ import annotations

from typing import Protocol

from .hostports import is_host_port, taken, unlisted_offer

#: what a pod asks of its node beyond GPUs, CPU and memory, as (resource name, amount) pairs
#: sorted by name; a node offers only those it lists (``Node.extra``), none of the others, except
#: host ports (``hostports``)
Extras = tuple[tuple[str, int], ...]
#: the extra every pod on a cluster takes one of: a node's pod limit (its ``pods`` allocatable)
PODS = "pods"


def extra_offered(extra: dict[str, int], name: str) -> int:
    """How much of ``name`` a node with extras ``extra`` (``Node.extra`` or ``extra_free``) has:
    what it lists; an unlisted host port is free, any other unlisted resource it has none of."""
    return extra.get(name, unlisted_offer(name))


class _Offers(Protocol):
    @property
    def extra(self) -> dict[str, int]: ...
    @property
    def extra_free(self) -> dict[str, int]: ...


class _Asks(Protocol):
    @property
    def extra(self) -> Extras: ...


class ExtraFit:
    """The node offers (``ever``) and has left (``now``) every extra the pod asks."""

    name = "ExtraFit"

    @staticmethod
    def trips(pod: _Asks) -> bool:
        return bool(pod.extra)

    @staticmethod
    def ever(node: _Offers, pod: _Asks) -> bool:
        offered = node.extra
        return all(extra_offered(offered, name) >= amount for name, amount in pod.extra)

    @staticmethod
    def now(node: _Offers, pod: _Asks) -> bool:
        left = node.extra_free
        for name, amount in pod.extra:
            if extra_offered(left, name) < amount:
                return False
        return True

    @staticmethod
    def why(node: _Offers, pod: _Asks) -> str | None:
        for name, amount in pod.extra:
            offered = extra_offered(node.extra, name)
            if offered < amount:
                return f"no {name} to offer" if not offered else f"too little {name} on node"
        for name, amount in pod.extra:
            if extra_offered(node.extra_free, name) < amount:
                if name == PODS:
                    return "node at its pod limit"
                return taken(name) if is_host_port(name) else f"not enough free {name}"
        return None
