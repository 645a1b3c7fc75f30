"""What the FGD comparison reports, computed the way the paper's analysis scripts do.

After every arrival (placed or not) the run records the GPU demand arrived so far, the GPUs
allocated and the cluster's fragment, all in milli-GPUs. A curve value at X% arrived is the mean
over the arrivals whose arrived demand rounds to X% of the cluster's GPUs (or, where none does,
to X-1..X+1%), as a percentage of the cluster's GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

CURVE_POINTS = 131
"""Curve values at 0%, 1%, ..., 130% arrived."""


@dataclass
class Timeline:
    """Per arrival: demand arrived, GPUs allocated, fragment (milli-GPUs)."""

    arrived: list[int]
    allocated: list[int]
    fragment: list[float]

    @classmethod
    def empty(cls) -> Timeline:
        return cls([], [], [])

    def record(self, arrived: int, allocated: int, fragment: float) -> None:
        self.arrived.append(arrived)
        self.allocated.append(allocated)
        self.fragment.append(fragment)


def curve(timeline: Timeline, values: list[float] | list[int], total_milli: int) -> list[float | None]:
    """``values`` as a % of the cluster at each whole % of arrived demand (None where no data)."""
    arrived_pct = np.round(np.asarray(timeline.arrived, dtype=float) * 100 / total_milli)
    value_pct = np.asarray(values, dtype=float) * 100 / total_milli
    out: list[float | None] = []
    for x in range(CURVE_POINTS):
        hit = arrived_pct == x
        if not hit.any():
            hit = (arrived_pct >= x - 1) & (arrived_pct <= x + 1)
        out.append(float(value_pct[hit].mean()) if hit.any() else None)
    return out
