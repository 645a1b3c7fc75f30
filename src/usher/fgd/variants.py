"""The FGD paper's workload variants, built from ``openb_pod_list_default`` (``--workload NAME``).

The paper (Weng et al., ATC'23, Sec. 6) evaluates 17 workloads drawn from the default pod list;
only the default, ``gpushare40`` and ``multigpu20`` lists are public in the trace folder. This
module builds the others the way the two public variants were built (checked row by row against
them) and with the definitions the authors' plot scripts give each family:

- ``gpushareP`` (40, 60, 80, 100): GPU-sharing pods (one GPU, less than all of it) make P% of
  the GPU *requests* (milli-GPUs). The non-GPU pods are kept; the GPU pods are drawn again with
  replacement, as many as before, a share pod with the probability that makes the expected
  share P% (``share_probability``), else a whole-GPU pod. The public ``gpushare40`` is exactly
  this: the same 1,088 non-GPU pods, 7,064 GPU pods all copies of default rows, 40.1% shared.
- ``multigpuP`` (20, 30, 40, 50): multi-GPU pods make P% of the GPU requests. Every default pod
  is kept and copies of its multi-GPU pods, drawn with replacement, are appended until they do.
  The public ``multigpu20`` is the default list plus 172 such copies (20.4%).
- ``cpuNNN`` (050, 100, 200, 250 = 5, 10, 20, 25%): non-GPU pods make that share of the pod
  *count* ("proportion of non-GPU workloads in terms of task number"; the default has 13.3%).
  The GPU pods are kept; non-GPU pods are dropped at random, or copies drawn with replacement
  are appended, until their count is right. The node list stays ``openb_node_list_gpu_node``,
  as in the paper's artifacts.
- ``gpuspecP`` (10, 20, 25, 33): pods with a GPU-model constraint make P% of the GPU requests.
  GPU pods are visited in a random order and constrained until they do; each constrained pod
  accepts a model set drawn from ``SPEC_WEIGHTS``, among the sets with a node that could hold
  the pod when empty. The default list has no constraints; the weights are the frequencies of
  the sets in a sample of 151 constrained pods of the authors' ``openb_pod_list_gpuspec33``.

Every variant is drawn from its own random stream, seeded with ``VARIANT_SEED`` and its name,
so a variant is the same file on every machine and independent of the run seeds. The pods are
renamed ``openb-pod-NNNN`` in file order, as in the public lists.
"""

from __future__ import annotations

import csv
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

import numpy as np

VARIANT_SEED = 2023
"""Seeds every variant's random stream (with its name); unrelated to the run seeds."""
TRACE_FOLDER = "alibaba-gpu-v2023"
"""The openb lists' folder under the traces folder."""
NODE_FILE = "openb_node_list_gpu_node.csv"
DEFAULT_POD_FILE = "openb_pod_list_default.csv"
MILLI = 1000
COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
           "creation_time", "deletion_time", "scheduled_time")

SPEC_WEIGHTS: dict[str, int] = {
    "T4": 71, "G2": 28, "V100M16|V100M32": 13, "P100|V100M16|V100M32": 12, "P100": 9, "G3": 7,
    "P100|T4|V100M16|V100M32": 6, "V100M32": 2, "A10|G2|T4|V100M16|V100M32": 2, "G2|P100|T4|V100M16|V100M32": 1,
}
"""GPU-model sets of constrained pods and how often each was seen (see the module's docstring)."""


class Family(StrEnum):
    """What a workload varies."""

    PUBLIC = "public"
    GPUSHARE = "gpushare"
    MULTIGPU = "multigpu"
    CPU = "cpu"
    GPUSPEC = "gpuspec"


@dataclass(frozen=True)
class Workload:
    """A named workload: a public pod list read as it is, or a variant built from the default."""

    name: str
    family: Family
    percent: float
    """The defining quantity's target, in % (see ``defining_percent``)."""

    @property
    def public_file(self) -> str:
        return f"openb_pod_list_{self.name}.csv"


def _workloads() -> dict[str, Workload]:
    out = {"default": Workload("default", Family.PUBLIC, 0.0),
           "gpushare40": Workload("gpushare40", Family.PUBLIC, 40.0),
           "multigpu20": Workload("multigpu20", Family.PUBLIC, 20.0)}
    for p in (60, 80, 100):
        out[f"gpushare{p}"] = Workload(f"gpushare{p}", Family.GPUSHARE, float(p))
    for p in (30, 40, 50):
        out[f"multigpu{p}"] = Workload(f"multigpu{p}", Family.MULTIGPU, float(p))
    for code in ("050", "100", "200", "250"):
        out[f"cpu{code}"] = Workload(f"cpu{code}", Family.CPU, int(code) / 10)
    for p in (10, 20, 25, 33):
        out[f"gpuspec{p}"] = Workload(f"gpuspec{p}", Family.GPUSPEC, float(p))
    return out


WORKLOADS: dict[str, Workload] = _workloads()
"""Every name ``--workload`` accepts, the public three first."""

Row = dict[str, str]


class VariantError(ValueError):
    """A workload that cannot be built (unknown name, missing trace file)."""


# -- what a pod is ------------------------------------------------------------------------


def gpu_request(row: Row) -> int:
    """The pod's GPU request in milli-GPUs."""
    return int(row["num_gpu"]) * int(row["gpu_milli"])


def is_gpu(row: Row) -> bool:
    return gpu_request(row) > 0


def is_share(row: Row) -> bool:
    return int(row["num_gpu"]) == 1 and 0 < int(row["gpu_milli"]) < MILLI


def is_multi(row: Row) -> bool:
    return int(row["num_gpu"]) > 1


def is_constrained(row: Row) -> bool:
    return is_gpu(row) and bool((row.get("gpu_spec") or "").strip())


def defining_percent(rows: Sequence[Row], family: Family) -> float:
    """The quantity a family varies, in %: share, multi-GPU or constrained pods' part of the GPU
    requests, or non-GPU pods' part of the pod count."""
    if family == Family.CPU:
        return 100.0 * sum(not is_gpu(r) for r in rows) / len(rows)
    test = {Family.GPUSHARE: is_share, Family.MULTIGPU: is_multi, Family.GPUSPEC: is_constrained}[family]
    total = sum(gpu_request(r) for r in rows)
    return 100.0 * sum(gpu_request(r) for r in rows if test(r)) / total


# -- building -----------------------------------------------------------------------------


def share_probability(rows: Sequence[Row], percent: float) -> float:
    """The chance of drawing a share pod that makes shares ``percent``% of the expected GPU request."""
    shares = [gpu_request(r) for r in rows if is_share(r)]
    wholes = [gpu_request(r) for r in rows if is_gpu(r) and not is_share(r)]
    p = percent / 100
    if p >= 1 or not wholes:
        return 1.0
    mean_share, mean_whole = float(np.mean(shares)), float(np.mean(wholes))
    return p * mean_whole / (p * mean_whole + (1 - p) * mean_share)


def _gpushare(rows: list[Row], percent: float, rng: np.random.Generator) -> list[Row]:
    gpu = [r for r in rows if is_gpu(r)]
    shares = [r for r in gpu if is_share(r)]
    wholes = [r for r in gpu if not is_share(r)]
    k = round(share_probability(rows, percent) * len(gpu))
    drawn = [shares[i] for i in rng.integers(len(shares), size=k)]
    if len(gpu) > k:
        drawn += [wholes[i] for i in rng.integers(len(wholes), size=len(gpu) - k)]
    drawn = [drawn[i] for i in rng.permutation(len(drawn))]
    return [r for r in rows if not is_gpu(r)] + drawn


def _multigpu(rows: list[Row], percent: float, rng: np.random.Generator) -> list[Row]:
    multi = [r for r in rows if is_multi(r)]
    out = list(rows)
    total = sum(gpu_request(r) for r in rows)
    part = sum(gpu_request(r) for r in multi)
    while part < percent / 100 * total:
        extra = multi[int(rng.integers(len(multi)))]
        out.append(extra)
        part += gpu_request(extra)
        total += gpu_request(extra)
    return out


def _cpu(rows: list[Row], percent: float, rng: np.random.Generator) -> list[Row]:
    gpu_count = sum(is_gpu(r) for r in rows)
    cpu_rows = [i for i, r in enumerate(rows) if not is_gpu(r)]
    want = round(percent / (100 - percent) * gpu_count)
    if want <= len(cpu_rows):
        dropped = {int(i) for i in rng.choice(cpu_rows, size=len(cpu_rows) - want, replace=False)}
        return [r for i, r in enumerate(rows) if i not in dropped]
    extra = [rows[cpu_rows[int(i)]] for i in rng.integers(len(cpu_rows), size=want - len(cpu_rows))]
    return list(rows) + extra


@dataclass(frozen=True)
class NodeShape:
    model: str
    gpus: int
    cpu: int


def read_node_shapes(nodes_file: Path) -> list[NodeShape]:
    """The distinct (model, GPUs, CPU) of an openb node list."""
    with nodes_file.open(newline="", encoding="utf-8") as handle:
        shapes = {NodeShape(r["model"], int(r["gpu"]), int(r["cpu_milli"]))
                  for r in csv.DictReader(handle) if int(r["gpu"]) > 0}
    return sorted(shapes, key=lambda s: (s.model, s.gpus, s.cpu))


def spec_fits(spec: str, row: Row, nodes: Sequence[NodeShape]) -> bool:
    """Whether some node of a model in ``spec`` could hold the pod when empty."""
    models = set(spec.split("|"))
    gpus = max(1, int(row["num_gpu"]))
    return any(n.model in models and n.gpus >= gpus and n.cpu >= int(row["cpu_milli"]) for n in nodes)


def _gpuspec(rows: list[Row], percent: float, rng: np.random.Generator, nodes: Sequence[NodeShape]) -> list[Row]:
    out = [dict(r) for r in rows]
    total = sum(gpu_request(r) for r in out)
    part = sum(gpu_request(r) for r in out if is_constrained(r))
    gpu_rows = [i for i, r in enumerate(out) if is_gpu(r)]
    for i in rng.permutation(gpu_rows):
        if part >= percent / 100 * total:
            break
        row = out[int(i)]
        if is_constrained(row):
            continue
        specs = [s for s in SPEC_WEIGHTS if spec_fits(s, row, nodes)]
        if not specs:
            continue
        weights = np.array([SPEC_WEIGHTS[s] for s in specs], dtype=float)
        row["gpu_spec"] = specs[int(rng.choice(len(specs), p=weights / weights.sum()))]
        part += gpu_request(row)
    return out


def build(rows: Sequence[Row], family: Family, percent: float, name: str,
          nodes: Sequence[NodeShape] = ()) -> list[Row]:
    """The variant of ``rows`` (the default list) with ``percent`` of what ``family`` varies,
    drawn from the stream seeded with ``VARIANT_SEED`` and ``name``; pods renamed in order."""
    rng = np.random.default_rng([VARIANT_SEED, zlib.crc32(name.encode())])
    rows = list(rows)
    if family == Family.GPUSHARE:
        built = _gpushare(rows, percent, rng)
    elif family == Family.MULTIGPU:
        built = _multigpu(rows, percent, rng)
    elif family == Family.CPU:
        built = _cpu(rows, percent, rng)
    elif family == Family.GPUSPEC:
        built = _gpuspec(rows, percent, rng, nodes)
    else:
        raise VariantError(f"{name}: a public list is read, not built")
    return [{**r, "name": f"openb-pod-{i:04d}"} for i, r in enumerate(built)]


# -- files --------------------------------------------------------------------------------


def read_rows(pods_file: Path) -> list[Row]:
    if not pods_file.is_file():
        raise VariantError(f"{pods_file}: no such file")
    with pods_file.open(newline="", encoding="utf-8") as handle:
        return [{k: (v or "") for k, v in r.items() if k in COLUMNS} for r in csv.DictReader(handle)]


def write_rows(rows: Sequence[Row], path: Path) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, COLUMNS, restval="")
        writer.writeheader()
        writer.writerows(rows)


def unknown_workload(name: str) -> str:
    return f"--workload: unknown workload {name!r}; one of: {', '.join(WORKLOADS)}"


def pods_file(name: str, openb: Path, scratch: Path) -> Path:
    """The pod list of workload ``name``: the public file in ``openb``, or the variant built from
    its default list and written to ``scratch``."""
    workload = WORKLOADS.get(name)
    if workload is None:
        raise VariantError(unknown_workload(name))
    if workload.family == Family.PUBLIC:
        path = openb / workload.public_file
        if not path.is_file():
            raise VariantError(f"{path}: no such file")
        return path
    nodes: list[NodeShape] = []
    if workload.family == Family.GPUSPEC:
        if not (openb / NODE_FILE).is_file():
            raise VariantError(f"{openb / NODE_FILE}: no such file")
        nodes = read_node_shapes(openb / NODE_FILE)
    rows = build(read_rows(openb / DEFAULT_POD_FILE), workload.family, workload.percent, name, nodes)
    path = scratch / workload.public_file
    write_rows(rows, path)
    return path
