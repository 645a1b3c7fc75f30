"""Whether a GPU is fit for work, from the signals NVML gives: XIDs, ECC, memory repair, throttling.

A GPU is unhealthy, and the agent publishes it in ``usher/gpu-health`` so the scheduler stops
placing pods on it, when any of these holds (``problems`` says which, in words):

- it is lost (NVML answers "GPU is lost": it has fallen off the bus);
- a critical XID was seen while the agent ran: any XID except the ones an application causes
  (``APPLICATION_XIDS``: illegal memory access, a kernel killed, ...), as NVIDIA's device plugin
  judges them;
- uncorrectable ECC errors were counted since the driver loaded (volatile counter);
- retired pages or a row remapping are pending (the GPU needs a reset before the memory is
  whole), or row remapping failed.

Clock throttling is reported by name (``throttle_reasons``) but does not make a GPU unhealthy: a
power cap or a hot afternoon slows a GPU without making it wrong.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum

APPLICATION_XIDS: frozenset[int] = frozenset({13, 31, 43, 45, 68, 109})
"""XIDs an application causes (graphics engine exception, MMU fault, a stopped or killed context,
a video decoder exception, a context switch timeout): the GPU itself is fine."""

XID_MEANINGS: dict[int, str] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
}
"""What the common hardware XIDs mean, for the message (others are named by number only)."""


class Throttle(StrEnum):
    """Why the GPU's clocks are held down (NVML's clocks event reasons, by their NVML names)."""

    APPLICATIONS_CLOCKS = "ApplicationsClocksSetting"
    SW_POWER_CAP = "SwPowerCap"
    HW_SLOWDOWN = "HwSlowdown"
    SYNC_BOOST = "SyncBoost"
    SW_THERMAL = "SwThermalSlowdown"
    HW_THERMAL = "HwThermalSlowdown"
    HW_POWER_BRAKE = "HwPowerBrakeSlowdown"
    DISPLAY_CLOCK = "DisplayClockSetting"


THROTTLE_BITS: dict[int, Throttle] = {
    0x2: Throttle.APPLICATIONS_CLOCKS,
    0x4: Throttle.SW_POWER_CAP,
    0x8: Throttle.HW_SLOWDOWN,
    0x10: Throttle.SYNC_BOOST,
    0x20: Throttle.SW_THERMAL,
    0x40: Throttle.HW_THERMAL,
    0x80: Throttle.HW_POWER_BRAKE,
    0x100: Throttle.DISPLAY_CLOCK,
}
"""NVML's reason bits (``nvmlClocksEventReason*``); bit 0x1, idle, is no throttling."""


def throttle_reasons(mask: int) -> list[Throttle]:
    """The reasons set in an NVML clocks-event mask, in bit order."""
    return [reason for bit, reason in THROTTLE_BITS.items() if mask & bit]


def describe_xid(xid: int) -> str:
    meaning = XID_MEANINGS.get(xid)
    return f"XID {xid}" + (f": {meaning}" if meaning else "")


def critical_xids(xids: Iterable[int]) -> list[int]:
    """The XIDs that say the GPU itself is at fault, in the order seen, without repeats."""
    return list(dict.fromkeys(x for x in xids if x not in APPLICATION_XIDS))


def problems(
    *,
    lost: bool = False,
    xids: Iterable[int] = (),
    uncorrected_ecc: int | None = None,
    retired_pages_pending: bool | None = None,
    remap_pending: bool | None = None,
    remap_failed: bool | None = None,
) -> list[str]:
    """Why a GPU is unfit for work, one phrase each; empty when no signal says so."""
    found = []
    if lost:
        found.append("GPU is lost (fallen off the bus)")
    found += [describe_xid(x) for x in critical_xids(xids)]
    if uncorrected_ecc:
        found.append(f"{uncorrected_ecc} uncorrectable ECC error{'s' if uncorrected_ecc != 1 else ''} since the driver loaded")
    if retired_pages_pending:
        found.append("retired memory pages pending: reset the GPU")
    if remap_pending:
        found.append("row remapping pending: reset the GPU")
    if remap_failed:
        found.append("row remapping failed")
    return found
