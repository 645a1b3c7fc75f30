"""Named scheduling policies: the switches a cycle runs with, so baselines are one line each.

``usher`` is the default and turns everything on. ``fifo`` is a plain strict-FIFO baseline
(each queue stops at its first blocked job; no backfill, no fair share, no preemption) that
shows what the rest buys. The benchmarks issue adds its baselines here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True, frozen=True)
class Policy:
    name: str
    fair_share: bool = True
    backfill: bool = True
    preemption: bool = True
    strict_fifo: bool = False


POLICIES: dict[str, Policy] = {
    "usher": Policy("usher"),
    "fifo": Policy("fifo", fair_share=False, backfill=False, preemption=False, strict_fifo=True),
}


def get_policy(name: str) -> Policy:
    try:
        return POLICIES[name]
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None
