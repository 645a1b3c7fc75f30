"""Which nodes a pod may use, by its volumes: kube-scheduler's volume filters, for usher.

``Storage`` is the cluster's storage as usher's caches hold it (claims, volumes, classes,
capacities, each node's CSI attach limits, and which live pods use which claim where). For one
pod, ``sort_claims`` is VolumeBinding's PreFilter: each claim of the pod is *bound* (its volume's
node affinity applies), *delayed* (its class is ``WaitForFirstConsumer``: usher picks the node)
or a *blocker* that keeps the pod off every node (claim or class not found, an unbound claim of
an ``Immediate`` class, a ``ReadWriteOncePod`` claim another pod uses...). ``choose`` is the
Filter for one node, and says what binding there would take: a bound volume must fit the node
(node affinity and VolumeZone's zone labels); a delayed claim that already has a selected node
may go only there; else the smallest matching available static volume (class, volume mode,
access modes, size, selector, node affinity; not claimed by another) is bound to it, else the
class must be able to provision there (a provisioner, ``allowedTopologies``, and, when the
class's CSIDriver says ``storageCapacity: true``, a CSIStorageCapacity of the class that serves
the node with room for the claim: as kube-scheduler, none at all means no room; a driver without
that flag, or without a CSIDriver object, is not asked). A node where the pod's CSI volumes would
exceed a driver's attach limit (CSINode) is out, as with NodeVolumeLimits; ``volume_ids`` and
``over_limit`` count them, so that the gang's PreBind can count a whole gang's pods on one node.
``fit_nodes`` runs the filter over the nodes and counts what excluded each.

One deliberate difference from kube-scheduler: a node fits only where a ``ReadWriteOnce`` claim
already in use by a running pod is (it would fail with a Multi-Attach error elsewhere).

Pure: no I/O. A pod without claims costs one check.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..constraints import NodeLike
from . import reasons as say
from .model import (AccessMode, BindingMode, Capacity, Claim, PodVolume, Source, StorageClass, Volume,
                    _selects)
from .reasons import NODE_WORDS, Blocker, VolumeReason


@dataclass(slots=True)
class Storage:
    """The storage objects usher knows, by key, and who uses which claim."""

    claims: dict[str, Claim] = field(default_factory=dict)
    volumes: dict[str, Volume] = field(default_factory=dict)
    classes: dict[str, StorageClass] = field(default_factory=dict)
    capacities: dict[str, Capacity] = field(default_factory=dict)
    #: node name -> CSI driver -> attach limit (None: no limit)
    limits: dict[str, dict[str, int | None]] = field(default_factory=dict)
    #: CSIDriver name -> its ``spec.storageCapacity`` (whether schedulers check capacity for it)
    drivers: dict[str, bool] = field(default_factory=dict)
    #: claim key -> live pod key -> the pod's node (None: not bound yet)
    users: dict[str, dict[str, str | None]] = field(default_factory=dict)
    #: bumped on every change, so callers may keep results until it moves
    version: int = 0
    _by_class: dict[str, list[Volume]] | None = None
    _attached: dict[str, dict[str, set[str]]] | None = None
    _rooms: dict[str, _RoomIndex] | None = None

    def changed(self) -> None:
        self.version += 1
        self._by_class = None
        self._attached = None
        self._rooms = None

    def set_use(self, pod: str, node: str | None, claims: Iterable[str]) -> None:
        """Record that live pod ``pod`` (on ``node``) uses ``claims``; no claims: it uses none."""
        wanted = set(claims)
        for key in [k for k, pods in self.users.items() if pod in pods and k not in wanted]:
            del self.users[key][pod]
            if not self.users[key]:
                del self.users[key]
        for key in wanted:
            self.users.setdefault(key, {})[pod] = node
        self.changed()

    def volumes_of_class(self, name: str) -> list[Volume]:
        if self._by_class is None:
            by: dict[str, list[Volume]] = {}
            for v in self.volumes.values():
                by.setdefault(v.class_name, []).append(v)
            for vs in by.values():
                vs.sort(key=lambda v: (v.capacity, v.name))
            self._by_class = by
        return self._by_class.get(name, [])

    def attached(self, node: str) -> dict[str, set[str]]:
        """The CSI volumes in use on ``node`` by driver (a volume's name, or ``claim:<key>``)."""
        if self._attached is None:
            on: dict[str, dict[str, set[str]]] = {}
            for key, pods in self.users.items():
                for where in {n for n in pods.values() if n is not None}:
                    ident = self._volume_id(key)
                    if ident is not None:
                        on.setdefault(where, {}).setdefault(ident[0], set()).add(ident[1])
            self._attached = on
        return self._attached.get(node, {})

    def _volume_id(self, key: str) -> tuple[str, str] | None:
        claim = self.claims.get(key)
        if claim is None:
            return None
        if claim.volume_name:
            v = self.volumes.get(claim.volume_name)
            return (v.driver, v.name) if v is not None and v.driver else None
        cls = self.classes.get(claim.class_name)
        return (cls.provisioner, f"claim:{key}") if cls is not None and cls.provisions else None

    def tracks_capacity(self, cls: StorageClass) -> list[Capacity] | None:
        """The CSIStorageCapacities of the class, when its driver asks schedulers to check them
        (its CSIDriver says ``storageCapacity: true``); None when capacity is not checked."""
        if not self.drivers.get(cls.provisioner):
            return None
        return [c for c in self.capacities.values() if c.class_name == cls.name]

    def room_on(self, cls: StorageClass, labels: Mapping[str, str]) -> int | None:
        """The most room any CSIStorageCapacity of the class gives a node with ``labels`` (0: none
        serves it); None when capacity is not checked for the class. Looked up by the labels the
        capacities select on (a cluster publishes one per node or zone), not by trying each."""
        if not self.drivers.get(cls.provisioner):
            return None
        if self._rooms is None:
            self._rooms = {}
        index = self._rooms.get(cls.name)
        if index is None:
            index = self._rooms[cls.name] = _RoomIndex.of(c for c in self.capacities.values() if c.class_name == cls.name)
        return index.room(labels)


@dataclass(slots=True)
class _RoomIndex:
    """One class's CSIStorageCapacities by what they select: those that select by labels alone
    (``matchLabels``, the usual one per node or zone), the most room per label values, keyed by
    their label keys; the rest (with expressions) tried one by one."""

    by_keys: dict[tuple[str, ...], dict[tuple[str, ...], int]]
    others: list[Capacity]

    @classmethod
    def of(cls, capacities: Iterable[Capacity]) -> _RoomIndex:
        by_keys: dict[tuple[str, ...], dict[tuple[str, ...], int]] = {}
        others: list[Capacity] = []
        for c in capacities:
            if c.topology is None:
                continue  # selects no node
            labels, expressions = c.topology.match_labels, c.topology.expressions
            if expressions:
                others.append(c)
                continue
            keys = tuple(sorted(k for k, _ in labels))
            values = tuple(dict(labels)[k] for k in keys)
            rooms = by_keys.setdefault(keys, {})
            rooms[values] = max(rooms.get(values, 0), c.room() or 0)
        return cls(by_keys, others)

    def room(self, labels: Mapping[str, str]) -> int:
        best = 0
        for keys, rooms in self.by_keys.items():
            values = tuple(labels.get(k) for k in keys)
            if None not in values:
                best = max(best, rooms.get(values, 0))  # type: ignore[arg-type]
        for c in self.others:
            if c.serves(labels):
                best = max(best, c.room() or 0)
        return best


@dataclass(slots=True, frozen=True)
class PodClaims:
    """A pod's claims sorted as VolumeBinding's PreFilter does."""

    pod: str = ""
    bound: tuple[tuple[Claim, Volume], ...] = ()
    delayed: tuple[Claim, ...] = ()
    blockers: tuple[Blocker, ...] = ()
    #: single-node claims another running pod uses: claim key -> that pod's node
    in_use: tuple[tuple[str, str], ...] = ()

    @property
    def free(self) -> bool:
        """Nothing about its volumes limits where it goes."""
        return not (self.bound or self.delayed or self.blockers or self.in_use)


NO_CLAIMS = PodClaims()


def sort_claims(pod: str, uid: str, volumes: Iterable[PodVolume], storage: Storage) -> PodClaims:
    """Sort the claims of pod ``pod`` (``ns/name``, uid ``uid``) into bound, delayed and blockers."""
    namespace = pod.split("/", 1)[0]
    bound: list[tuple[Claim, Volume]] = []
    delayed: list[Claim] = []
    blockers: list[Blocker] = []
    in_use: list[tuple[str, str]] = []
    seen: set[str] = set()
    for vol in volumes:
        key = f"{namespace}/{vol.claim}"
        if key in seen:
            continue
        seen.add(key)
        claim = storage.claims.get(key)
        ephemeral = vol.source == Source.EPHEMERAL
        if claim is None:
            blockers.append(say.ephemeral_not_found(vol.volume, key) if ephemeral else say.claim_not_found(vol.volume, key))
            continue
        if ephemeral and uid and uid not in claim.owner_uids:
            blockers.append(say.claim_not_owned(vol.volume, key))
            continue
        if claim.deleting:
            blockers.append(say.claim_deleting(key))
            continue
        others = {p: n for p, n in storage.users.get(key, {}).items() if p != pod}
        if AccessMode.RWOP in claim.access_modes and others:
            blockers.append(say.rwop_in_use(key, min(others)))
            continue
        running = sorted({n for n in others.values() if n is not None})
        if claim.single_node and running:
            in_use.append((key, running[0]))
        if claim.volume_name and (claim.bound or claim.phase == "Lost"):
            volume = storage.volumes.get(claim.volume_name)
            if volume is None:
                blockers.append(say.volume_not_found(key, claim.volume_name))
            elif claim.phase == "Lost":
                blockers.append(say.claim_lost(key, claim.volume_name))
            else:
                bound.append((claim, volume))
            continue
        cls = storage.classes.get(claim.class_name) if claim.class_name else None
        if claim.class_name and cls is None:
            blockers.append(say.class_not_found(key, claim.class_name))
        elif cls is not None and cls.binding_mode == BindingMode.WAIT and not claim.volume_name:
            delayed.append(claim)
        else:
            blockers.append(say.unbound_immediate(key, claim.class_name))
    if not (bound or delayed or blockers or in_use):
        return NO_CLAIMS
    delayed.sort(key=lambda c: (c.request, c.name))
    return PodClaims(pod, tuple(bound), tuple(delayed), tuple(blockers), tuple(in_use))


@dataclass(slots=True, frozen=True)
class Choice:
    """What binding the pod's claims on one node takes, or why the node does not fit."""

    reason: VolumeReason | None = None
    claim: str = ""
    #: delayed claims bound to static volumes: (claim key, volume name)
    bindings: tuple[tuple[str, str], ...] = ()
    #: delayed claims to provision on this node
    provisions: tuple[str, ...] = ()


def matches(claim: Claim, volume: Volume, node: str, labels: Mapping[str, str]) -> bool:
    """Whether a static volume can be bound to a delayed claim for a pod on ``node``."""
    if volume.deleting or volume.class_name != claim.class_name or volume.volume_mode != claim.volume_mode:
        return False
    if volume.claim_ref is not None:
        ns, name, uid = volume.claim_ref
        if (ns, name) != (claim.namespace, claim.name) or (uid and claim.uid and uid != claim.uid):
            return False
    elif volume.phase != "Available":
        return False
    if claim.selector is not None and not _selects(claim.selector, dict(volume.labels)):
        return False
    if not claim.access_modes <= volume.access_modes or volume.capacity < claim.request:
        return False
    return volume.fits(node, labels)


def choose(pods: PodClaims, node: str, labels: Mapping[str, str], storage: Storage,
           taken: frozenset[str] = frozenset()) -> Choice:
    """The Filter for one node: the first thing that keeps the pod off it, else what binding takes.
    ``taken``: static volumes already chosen for other claims (of the gang)."""
    for key, where in pods.in_use:
        if where != node:
            return Choice(VolumeReason.IN_USE_ELSEWHERE, key)
    for claim, volume in pods.bound:
        if not volume.fits(node, labels):
            return Choice(VolumeReason.NODE_CONFLICT, claim.key)
    bindings: list[tuple[str, str]] = []
    provisions: list[str] = []
    chosen = set(taken)
    for claim in pods.delayed:
        if claim.selected_node is not None:
            if claim.selected_node != node:
                return Choice(VolumeReason.SELECTED_ELSEWHERE, claim.key)
            provisions.append(claim.key)
            continue
        volume = next((v for v in storage.volumes_of_class(claim.class_name)
                       if v.name not in chosen and matches(claim, v, node, labels)), None)
        if volume is not None:
            chosen.add(volume.name)
            bindings.append((claim.key, volume.name))
            continue
        cls = storage.classes[claim.class_name]
        if not cls.provisions or not cls.allows(labels):
            return Choice(VolumeReason.NO_VOLUME, claim.key)
        room = storage.room_on(cls, labels) if claim.request else None
        if room is not None and room < claim.request:
            return Choice(VolumeReason.NO_CAPACITY, claim.key)
        provisions.append(claim.key)
    over = _over_limit(pods, node, storage, bindings, provisions)
    if over is not None:
        return Choice(VolumeReason.ATTACH_LIMIT, over)
    return Choice(None, "", tuple(bindings), tuple(provisions))


def _over_limit(pods: PodClaims, node: str, storage: Storage, bindings: list[tuple[str, str]],
                provisions: list[str]) -> str | None:
    """The first claim that would take a driver over its attach limit on ``node`` (NodeVolumeLimits)."""
    if not storage.limits.get(node):
        return None
    over = over_limit(node, storage, volume_ids(pods, storage, bindings, provisions))
    return over[0] if over is not None else None


#: one CSI volume a pod would use: (driver, volume id, claim key); a volume to provision is
#: ``claim:<key>`` until it exists
VolumeId = tuple[str, str, str]


def volume_ids(pods: PodClaims, storage: Storage, bindings: Iterable[tuple[str, str]],
               provisions: Iterable[str]) -> list[VolumeId]:
    """The CSI volumes the pod would use with these bindings and provisions, each with its driver."""
    out: list[VolumeId] = [(v.driver, v.name, c.key) for c, v in pods.bound if v.driver]
    for key, name in bindings:
        v = storage.volumes[name]
        if v.driver:
            out.append((v.driver, v.name, key))
    for key in provisions:
        cls = storage.classes.get(storage.claims[key].class_name)
        if cls is not None and cls.provisions:
            out.append((cls.provisioner, f"claim:{key}", key))
    return out


def over_limit(node: str, storage: Storage, new: Iterable[VolumeId],
               adding: Mapping[str, set[str]] | None = None) -> tuple[str, str, int, int] | None:
    """Whether ``new`` volumes on ``node``, beside those attached there and ``adding`` (driver ->
    volume ids others of the gang bring), take a driver past its attach limit: the first claim
    that does, its driver, the limit and how many volumes it would be; None when all fit."""
    limits = storage.limits.get(node)
    if not limits:
        return None
    counts = {d: set(ids) for d, ids in storage.attached(node).items()}
    for driver, ids in (adding or {}).items():
        counts.setdefault(driver, set()).update(ids)
    for driver, ident, key in new:
        counts.setdefault(driver, set()).add(ident)
        limit = limits.get(driver)
        if limit is not None and len(counts[driver]) > limit:
            return key, driver, limit, len(counts[driver])
    return None


@dataclass(slots=True)
class VolumeFit:
    """Where a pod's volumes let it go, and why not elsewhere."""

    #: the names of the nodes it may use; None: every node
    eligible: frozenset[str] | None = None
    #: reasons it may use no node at all, whatever the nodes
    blockers: tuple[Blocker, ...] = ()
    excluded: Counter[VolumeReason] = field(default_factory=Counter)
    #: for each reason, the first claim it was about
    claims: dict[VolumeReason, str] = field(default_factory=dict)
    #: each excluded node's reason, by node name
    nodes: dict[str, VolumeReason] = field(default_factory=dict)
    #: the nodes out for storage that no CSIStorageCapacity of the claim's class serves at all
    unserved: frozenset[str] = frozenset()

    def explain(self, storage: Storage, among: Iterable[str] | None = None) -> str | None:
        """Why nodes are out, in words (None when none is), as kube-scheduler counts them: each
        node once, under its reason, with the claim, class and topology concerned. ``among``:
        count only these nodes (those the pod's node constraints left; the others are out for
        those, as kube-scheduler's node filters run before its volume filters)."""
        if self.blockers:
            return "; ".join(b.message for b in self.blockers)
        keep = None if among is None else set(among)
        by_reason: dict[VolumeReason, list[str]] = {}
        for node, reason in self.nodes.items():
            if keep is None or node in keep:
                by_reason.setdefault(reason, []).append(node)
        parts = []
        for reason, names in sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            n = len(names)
            which = f" ({', '.join(sorted(names))})" if n <= SHOWN_NODES else ""
            detail = _detail(reason, self.claims[reason], storage, unserved=self.unserved.issuperset(names))
            parts.append(f"{n} {'node' if n == 1 else 'nodes'}{which} {NODE_WORDS[reason]}: {detail}")
        return ", ".join(parts) or None


#: up to how many nodes of one reason are named
SHOWN_NODES = 3


FREE = VolumeFit()


def fit_nodes(pods: PodClaims, nodes: Iterable[NodeLike], storage: Storage) -> VolumeFit:
    """Run ``choose`` on every node; the nodes that pass and why the others do not."""
    if pods.free:
        return FREE
    if pods.blockers:
        return VolumeFit(frozenset(), pods.blockers)
    result = VolumeFit(frozenset())
    allowed = []
    unserved = []
    for node in nodes:
        choice = choose(pods, node.name, node.labels, storage)
        if choice.reason is None:
            allowed.append(node.name)
            continue
        result.excluded[choice.reason] += 1
        result.claims.setdefault(choice.reason, choice.claim)
        result.nodes[node.name] = choice.reason
        if choice.reason == VolumeReason.NO_CAPACITY and not _served(storage, choice.claim, node.labels):
            unserved.append(node.name)
    result.eligible = frozenset(allowed) if result.excluded else None
    result.unserved = frozenset(unserved)
    return result


def _served(storage: Storage, key: str, labels: Mapping[str, str]) -> bool:
    """Whether any CSIStorageCapacity of the claim's class serves a node with these labels."""
    claim = storage.claims.get(key)
    cls = storage.classes.get(claim.class_name) if claim is not None else None
    return cls is not None and any(c.serves(labels) for c in storage.tracks_capacity(cls) or ())


def _detail(reason: VolumeReason, key: str, storage: Storage, unserved: bool = False) -> str:
    """What about claim ``key`` keeps nodes out for ``reason``; ``unserved``: (for storage) no
    CSIStorageCapacity of its class serves any of them, rather than none with room."""
    claim = storage.claims.get(key)
    if claim is None:
        return f"claim {key}"
    if reason == VolumeReason.NODE_CONFLICT:
        volume = storage.volumes.get(claim.volume_name)
        where = volume.where() if volume is not None else "nowhere known"
        return f"claim {key} is bound to volume {claim.volume_name}, usable only where {where}"
    if reason == VolumeReason.SELECTED_ELSEWHERE:
        return f"claim {key} has selected node {claim.selected_node}"
    if reason == VolumeReason.IN_USE_ELSEWHERE:
        nodes = sorted({n for n in storage.users.get(key, {}).values() if n})
        return f"claim {key} is ReadWriteOnce and in use on {', '.join(nodes)}"
    size = _size(claim.request)
    if reason == VolumeReason.NO_CAPACITY:
        if unserved:
            keys = _topology_keys(storage, claim.class_name)
            if not keys:
                return (f"claim {key} asks {size} of class {claim.class_name!r}, whose driver has published no "
                        f"CSIStorageCapacity at all: it serves no node's topology (kubectl get csistoragecapacities -A)")
            return (f"claim {key} asks {size} of class {claim.class_name!r}, whose CSIStorageCapacities select nodes "
                    f"by {', '.join(keys)}, and none serves these nodes (a node without that label is in none)")
        return f"claim {key} asks {size} of class {claim.class_name!r}; no CSIStorageCapacity serving these nodes has room"
    if reason == VolumeReason.ATTACH_LIMIT:
        return f"claim {key} would take its driver past the node's attach limit (CSINode)"
    cls = storage.classes.get(claim.class_name)
    modes = ", ".join(sorted(claim.access_modes)) or "no access mode"
    how = ("its class cannot provision (no provisioner)" if cls is None or not cls.provisions
           else "its class's allowedTopologies exclude them")
    return f"no available volume of class {claim.class_name!r} for claim {key} ({size}, {modes}), and {how}"


def _topology_keys(storage: Storage, class_name: str) -> list[str]:
    """The node label keys the class's CSIStorageCapacities select nodes by."""
    keys: set[str] = set()
    for c in storage.capacities.values():
        if c.class_name == class_name and c.topology is not None:
            keys.update(k for k, _ in c.topology.match_labels)
            keys.update(e[0] for e in c.topology.expressions)
    return sorted(keys)


def _size(n: int) -> str:
    for unit, scale in (("Ti", 2**40), ("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale}{unit}"
    return f"{n} bytes"
