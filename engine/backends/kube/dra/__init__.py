"""Dynamic Resource Allocation for usher: GPUs that pods ask through ResourceClaims.

``model`` parses the ``resource.k8s.io/v1`` objects (refusing, with its field path, whatever usher
does not implement), ``cel`` evaluates device selectors, ``index`` keeps the watched objects and
says what a pod's claims ask (GPUs, nodes, problems) and which devices to give, and ``plan``
says what the bind path writes on each claim (``status.allocation`` and ``status.reservedFor``)
and how to undo it. The writes themselves are ``dra_prebind``'s (the binder's PreBind step), so
this package stays free of the client.
"""

from .cel import SelectorError, Selectors
from .index import NOTHING, DraIndex, PodAsk, PodClaim, choose
from .model import (API_VERSION, GPU_CLASS, GPU_DRIVER, PATHS, AllocationMode, ClaimSpec, Device, DraKind, Request,
                    Selector, device_name, parse_claim_spec)

__all__ = [
    "API_VERSION", "GPU_CLASS", "GPU_DRIVER", "NOTHING", "PATHS", "AllocationMode", "ClaimSpec", "Device", "DraIndex",
    "DraKind", "PodAsk", "PodClaim", "Request", "Selector", "SelectorError", "Selectors", "choose", "device_name",
    "parse_claim_spec",
]
