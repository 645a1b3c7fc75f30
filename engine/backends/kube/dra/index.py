"""The DRA objects usher watches, and what they mean for one pod: its GPUs, its nodes, its devices.

Intake feeds ``DraIndex`` with the informers' ResourceClaims, ResourceClaimTemplates,
DeviceClasses and ResourceSlices. For a pod, ``ask`` reads its ``spec.resourceClaims`` (a claim by
name, or the claim the resourceclaim controller made from a template, named in
``status.resourceClaimStatuses``; until it is made, the template's spec is read and the pod
waits for it, ``PodAsk.waiting``: nothing is wrong) and says how many GPUs they ask, which nodes
have devices enough that match every selector (the class's and the request's), and what usher
cannot honour, each with its field path.

How placement sees it: the GPU count is the pod's GPU count (quota, placement, why-pending,
preemption and backfill count it as they count ``nvidia.com/gpu``), and the nodes are a node
constraint (``PodAsk.nodes``), judged on devices alone, never on which are free now: usher's
own accounting of GPUs says that, and a job's constraints are judged once when it is made.
``choose`` then picks, at PreBind, the devices for each request on the pod's node: usher's
chosen GPUs first (device ``gpu-<i>`` for GPU ``i``), another matching free device in place of
one a selector excludes.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .cel import SelectorError, Selectors
from .model import (GPU_CLASS, GPU_DRIVER, AllocationMode, ClaimSpec, Device, DistinctAttribute, DraKind, MatchAttribute,
                    Request, allocated_node, class_selectors, parse_claim_spec, slice_devices)


@dataclass(frozen=True, slots=True)
class PodClaim:
    """One entry of a pod's ``spec.resourceClaims``, resolved."""

    #: the entry's name in the pod
    name: str
    #: the claim's key (``ns/name``); None while the resourceclaim controller has not made it
    key: str | None
    spec: ClaimSpec
    #: the node the claim is allocated on (None: not allocated)
    allocated_on: str | None = None
    #: the devices of its allocation (``(request, device)``)
    allocated: tuple[tuple[str, str], ...] = ()
    #: the uids its ``status.reservedFor`` names
    reserved_for: tuple[str, ...] = ()
    #: the other usher pods that name the claim (``ns/name``): a shared claim, whose devices all
    #: of them use (on one node) and one of them counts
    sharers: tuple[str, ...] = ()
    #: whether this pod counts the claim's devices as its GPUs (the first of the pods naming it
    #: that it is reserved for, by key; else the first by key): a shared claim's devices are
    #: counted once, in quota and on the node
    counted: bool = True


@dataclass(frozen=True, slots=True)
class PodAsk:
    """What a pod's claims ask, as placement needs it."""

    claims: tuple[PodClaim, ...] = ()
    gpus: int = 0
    #: the nodes its claims allow (None: any)
    nodes: frozenset[str] | None = None
    #: why the other nodes are not allowed, for the why-pending message
    exclusions: str | None = None
    problems: tuple[str, ...] = ()
    #: what the pod waits for, nothing being wrong (a claim the resourceclaim controller has
    #: not made from its template yet)
    waiting: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _SliceMeta:
    """Where one ResourceSlice belongs: its pool (``driver/name``), the pool's generation it
    was published in, and its node."""

    pool: str
    generation: int
    node: str


NOTHING = PodAsk()
#: how many ended pods' uids ``DraIndex.gone`` keeps
GONE_REMEMBERED = 10_000
#: how many answers of ``DraIndex._fit`` it keeps before it starts afresh
FITS_KEPT = 10_000


@dataclass(slots=True)
class DraIndex:
    claims: dict[str, dict[str, Any]] = field(default_factory=dict)
    templates: dict[str, dict[str, Any]] = field(default_factory=dict)
    classes: dict[str, dict[str, Any]] = field(default_factory=dict)
    slices: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: node -> NVIDIA's devices its slices publish (rebuilt on a slice change)
    devices: dict[str, list[Device]] = field(default_factory=dict)
    selectors: Selectors = field(default_factory=Selectors)
    #: usher's pods with ``spec.resourceClaims``, as last seen (the bind path reads their claims)
    pods: dict[str, dict[str, Any]] = field(default_factory=dict)

    #: uids of pods with claims that ended or went: the claims reserved only for them are about
    #: to be freed by the resourceclaim controller, and their devices count as free (a
    #: preemptor's PreBind does not fail on its victim's claim)
    gone: set[str] = field(default_factory=set)
    #: claim key -> the usher pods that name it (``resourceClaimName``): a claim named by two is shared
    users: dict[str, set[str]] = field(default_factory=dict)
    #: each slice's pool, generation and node, its GPUs, and the slices by pool and by node
    _slice_meta: dict[str, _SliceMeta] = field(default_factory=dict)
    _slice_devices: dict[str, list[Device]] = field(default_factory=dict)
    _pool_slices: dict[str, dict[str, None]] = field(default_factory=dict)
    _node_slices: dict[str, dict[str, None]] = field(default_factory=dict)
    #: what claims ask -> ``_fit``'s answer, until a slice or class changes
    _fits: dict[tuple[Any, ...], tuple[int, frozenset[str] | None, str | None]] = field(default_factory=dict)

    def sharers(self, key: str, *pods: dict[str, Any] | None) -> set[str]:
        """The other usher pods that name a claim one of ``pods`` names (their views change with it)."""
        return {p for pod in pods for c in _named_claims(pod) for p in self.users.get(c, ())} - {key}

    def pod_changed(self, key: str, obj: dict[str, Any] | None, live: bool = True) -> bool:
        """Remember an usher pod (None: deleted; ``live`` False: it ended); whether it has claims."""
        old = self.pods.get(key)
        if obj is None or not live:
            uid = ((obj or old or {}).get("metadata") or {}).get("uid")
            if uid and (obj or old or {}).get("spec", {}).get("resourceClaims"):
                if len(self.gone) >= GONE_REMEMBERED:
                    self.gone.clear()  # older ones are long deallocated
                self.gone.add(uid)
        for claim in _named_claims(old):
            self.users.get(claim, set()).discard(key)
            if not self.users.get(claim, True):
                del self.users[claim]
        if obj is None or not (obj.get("spec") or {}).get("resourceClaims"):
            self.pods.pop(key, None)
            return False
        self.pods[key] = obj
        if live:
            for claim in _named_claims(obj):
                self.users.setdefault(claim, set()).add(key)
        return True

    def object_changed(self, kind: DraKind, key: str, obj: dict[str, Any] | None) -> None:
        table = {DraKind.CLAIM: self.claims, DraKind.TEMPLATE: self.templates, DraKind.CLASS: self.classes,
                 DraKind.SLICE: self.slices}[kind]
        if obj is None:
            table.pop(key, None)
        elif kind == DraKind.CLAIM and _older(obj, table.get(key)):
            return  # the informer catching up with a claim our own write answered already
        else:
            table[key] = obj
        if kind == DraKind.SLICE:
            self._slices_changed(key, obj)
            self.selectors.forget()
        if kind in (DraKind.SLICE, DraKind.CLASS):
            self._fits.clear()  # the devices, or what a class selects, changed

    def readers(self, kind: DraKind, key: str, obj: dict[str, Any]) -> Iterable[str]:
        """The usher pods whose ``ask`` may read differently after this object changed: for a
        claim, the pods that name it and the pod it was made for (its owner); for a template,
        class or slice, every pod with claims. (A pod's ask reads only its own claims, never
        which devices other claims hold: usher's GPU accounting says that.)"""
        if kind != DraKind.CLAIM:
            return list(self.pods)
        ns = key.split("/", 1)[0]
        owners = {f"{ns}/{ref.get('name')}" for ref in (obj.get("metadata") or {}).get("ownerReferences") or []
                  if isinstance(ref, dict) and ref.get("kind") == "Pod"}
        return {k for k in self.users.get(key, set()) | owners if k in self.pods}

    def _slices_changed(self, key: str, obj: dict[str, Any] | None) -> None:
        """Each node's devices: of each pool, the slices of its newest generation only (older
        ones are being replaced, as kube-scheduler reads pools), one device per name. Only the
        nodes of the changed slice's pool are built again (a cluster's nodes publish a slice
        each, and the informer's first list delivers them one by one)."""
        touched: set[str] = set()
        old = self._slice_meta.pop(key, None)
        if old is not None:
            self._pool_slices.get(old.pool, {}).pop(key, None)
            self._node_slices.get(old.node, {}).pop(key, None)
            self._slice_devices.pop(key, None)
            touched.add(old.pool)
        spec = (obj or {}).get("spec") or {}
        node = spec.get("nodeName")
        if obj is not None and isinstance(node, str) and isinstance(spec.get("driver"), str):
            pool = spec.get("pool") or {}
            meta = _SliceMeta(f"{spec.get('driver')}/{pool.get('name')}", int(pool.get("generation") or 0), node)
            self._slice_meta[key] = meta
            self._pool_slices.setdefault(meta.pool, {})[key] = None
            self._node_slices.setdefault(node, {})[key] = None
            self._slice_devices[key] = [d for d in slice_devices(obj) if d.driver == GPU_DRIVER]
            touched.add(meta.pool)
        nodes = {self._slice_meta[k].node for p in touched for k in self._pool_slices.get(p, {})}
        if old is not None:
            nodes.add(old.node)
        newest = {p: max((self._slice_meta[k].generation for k in self._pool_slices.get(p, {})), default=0)
                  for p in {self._slice_meta[k].pool for n in nodes for k in self._node_slices.get(n, {})}}
        for n in nodes:
            found: dict[str, Device] = {}
            for k in self._node_slices.get(n, {}):
                meta = self._slice_meta[k]
                if meta.generation < newest[meta.pool]:
                    continue
                for d in self._slice_devices[k]:
                    found.setdefault(d.name, d)
            if found:
                self.devices[n] = sorted(found.values(), key=lambda d: (d.index if d.index is not None else 1 << 30, d.name))
            else:
                self.devices.pop(n, None)

    # -- a pod ----------------------------------------------------------------------------------

    def ask(self, pod: dict[str, Any]) -> PodAsk:
        """What the pod's claims ask (``NOTHING`` for a pod without claims); never raises."""
        entries = (pod.get("spec") or {}).get("resourceClaims") or []
        if not entries:
            return NOTHING
        meta = pod.get("metadata") or {}
        ns, uid = meta.get("namespace", "default"), meta.get("uid", "")
        own = f"{ns}/{meta.get('name', '')}"
        made = {s.get("name"): s.get("resourceClaimName") for s in (pod.get("status") or {}).get("resourceClaimStatuses") or []
                if isinstance(s, dict)}
        problems: list[str] = []
        waiting: list[str] = []
        claims: list[PodClaim] = []
        for i, entry in enumerate(entries):
            claim = self._resolve(entry, f"spec.resourceClaims[{i}]", ns, uid, own, made, problems, waiting)
            if claim is not None:
                claims.append(claim)
        for c in claims:
            problems.extend(c.spec.problems)
        try:
            gpus, nodes, why = self._fit(claims)
        except SelectorError as exc:
            said = str(exc)
            hit = next(((c, r) for c in claims for r in c.spec.requests if said.startswith(f"{r.path}.")), None)
            if hit is None:  # a DeviceClass's selector: name the request that uses the class
                hit = next(((c, r) for c in claims for r in c.spec.requests), None)
            named = f"claim {hit[0].key or hit[0].name}, request {hit[1].name}: " if hit is not None else ""
            return PodAsk(tuple(claims), problems=(*problems, f"{named}{said}"), waiting=tuple(waiting))
        # with problems, the GPUs still count (what the pod would hold is shown where it waits)
        return PodAsk(tuple(claims), gpus, nodes, why, tuple(problems), tuple(waiting))

    def _resolve(self, entry: Any, path: str, ns: str, uid: str, own: str, made: dict[str, Any],
                 problems: list[str], waiting: list[str]) -> PodClaim | None:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            problems.append(f"{path}.name: required")
            return None
        by_name, template = entry.get("resourceClaimName"), entry.get("resourceClaimTemplateName")
        if bool(by_name) == bool(template):
            problems.append(f"{path}: exactly one of resourceClaimName and resourceClaimTemplateName is required")
            return None
        if template:
            name = made.get(entry["name"])
            if entry["name"] in made and name is None:
                return None  # the controller says no claim is needed (a template of no devices)
            if name is None:
                obj = self.templates.get(f"{ns}/{template}")
                if obj is None:
                    problems.append(f"{path}.resourceClaimTemplateName: ResourceClaimTemplate {ns}/{template} not found")
                    return None
                spec = parse_claim_spec((obj.get("spec") or {}).get("spec"), f"ResourceClaimTemplate {ns}/{template} spec.spec")
                waiting.append(f"claim {entry['name']} ({path}) is still to be created from ResourceClaimTemplate "
                               f"{ns}/{template} by the cluster's resourceclaim controller")
                return PodClaim(entry["name"], None, spec)
        else:
            name = by_name
        key = f"{ns}/{name}"
        obj = self.claims.get(key)
        if obj is None:
            problems.append(f"{path}: ResourceClaim {key} not found")
            return None
        spec = parse_claim_spec(obj.get("spec"), f"ResourceClaim {key} spec")
        status = obj.get("status") or {}
        reserved = tuple(str(r.get("uid", "")) for r in status.get("reservedFor") or [] if isinstance(r, dict))
        if (obj.get("metadata") or {}).get("deletionTimestamp") and uid not in reserved:
            # as kube-scheduler: a claim being deleted is given to no new pod (the pods it is
            # reserved for keep it until they are done; a claim made again under its name is read then)
            waiting.append(f"ResourceClaim {key} ({path}) is being deleted")
            return PodClaim(entry["name"], key, spec)
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        # usher's other pods that name it (whether they may share it, being of one gang, is the
        # intake's to say: ``dra_pods.share_claims``); one of them counts its devices: the first
        # by key of those it is reserved for (so a pod that joins later takes nothing over), else
        # the first by key
        others = tuple(sorted(p for p in self.users.get(key, ()) if p != own
                              and (self.pods.get(p, {}).get("metadata") or {}).get("uid") != uid))
        uids = {p: str((self.pods.get(p, {}).get("metadata") or {}).get("uid", "")) for p in others}
        uids[own] = uid
        ours = set(uids.values())
        holding = sorted(p for p, u in uids.items() if u in reserved)
        counter = holding[0] if holding else min(uids)
        strangers = [u for u in reserved if u not in ours and u not in self.gone]
        if strangers:
            problems.append(f"{path}: ResourceClaim {key} is reserved for a pod usher does not place with this one "
                            f"(uid {strangers[0]}); usher shares a claim only among the pods of one gang it schedules")
        on = allocated_node(obj) if status.get("allocation") else None
        if status.get("allocation") and on is None:
            problems.append(f"{path}: ResourceClaim {key} is allocated for the nodes its allocation's nodeSelector "
                            f"picks, not for one named node; usher places pods only on claims allocated on one node")
        # a device given with admin access is not the pod's: others hold it (or may)
        return PodClaim(entry["name"], key, spec, on,
                        tuple((str(r.get("request")), str(r.get("device"))) for r in results
                              if isinstance(r, dict) and not r.get("adminAccess")),
                        reserved, others, counter == own)

    def _fit(self, claims: Sequence[PodClaim]) -> tuple[int, frozenset[str] | None, str | None]:
        """The GPUs the claims ask, the nodes whose devices can give them, and why not the rest.
        Kept by what the claims ask (not their names or paths: the pods of one template share
        it) until a slice or class changes; a selector error is never kept, so it names its path."""
        key = tuple((c.allocated_on, len(c.allocated), c.counted, c.spec.constraints,
                     tuple((r.name, r.device_class, r.mode, r.count, r.admin, r.tolerations,
                            tuple(x.expression for x in r.selectors),
                            tuple((a.name, a.device_class, a.tolerations, tuple(x.expression for x in a.selectors))
                                  for a in r.alternatives))
                           for r in c.spec.requests)) for c in claims)
        known = self._fits.get(key)
        if known is None:
            known = self._fit_now(claims)
            if len(self._fits) >= FITS_KEPT:
                self._fits.clear()
            self._fits[key] = known
        return known

    def _fit_now(self, claims: Sequence[PodClaim]) -> tuple[int, frozenset[str] | None, str | None]:
        requests = [r for c in claims if c.allocated_on is None for r in c.spec.requests]
        counted = [r for c in claims if c.allocated_on is None and c.counted for r in c.spec.requests if not r.admin]
        pinned = {c.allocated_on for c in claims if c.allocated_on is not None}
        # a shared claim's devices are the GPUs of the one pod that counts them (``PodClaim.counted``)
        gpus = sum(len(c.allocated) for c in claims if c.allocated_on is not None and c.counted)
        for r in requests:
            for one in r.alternatives or (r,):
                self.selectors.check(self.request_selectors(one))
        if not requests and not pinned:
            return 0, None, None
        allowed: set[str] = set()
        counts: dict[str, int] = {}
        for node, devices in self.devices.items():
            used: set[str] = set()
            mine = 0
            for c in claims:
                if c.allocated_on is not None:
                    continue
                chosen = choose(self, c.spec.requests, devices, (), used, c.spec.constraints)
                if chosen is None:
                    break
                admin = {r.name for r in c.spec.requests if r.admin}
                used.update(d.name for name, found in chosen.items() if name not in admin for d in found)
                if c.counted:
                    mine += sum(len(found) for name, found in chosen.items() if name not in admin)
            else:
                allowed.add(node)
                counts[node] = mine
        why = []
        if pinned:
            if len(pinned) > 1:
                why.append(f"its claims are allocated on different nodes ({', '.join(sorted(pinned))})")
                return gpus, frozenset(), "; ".join(why)
            node = next(iter(pinned))
            if node not in allowed:
                why.append(f"its allocated claims hold it to node {node}, whose devices cannot give its other requests")
            allowed &= pinned
            why.append(f"its allocated claims hold it to node {node}")
        if any(r.mode == AllocationMode.ALL for r in counted):
            # All: every matching device of the node; usher places such a pod on nodes of the most
            most = max(counts.values(), default=0)
            allowed = {n for n in allowed if counts[n] == most}
            gpus += most
        else:
            gpus += sum(r.count for r in counted)
        if len(allowed) < len(self.devices) or not self.devices:
            names = ", ".join(f"{r.name} ({r.count if r.mode == AllocationMode.EXACT_COUNT else 'All'})" for r in requests)
            if requests:
                why.insert(0, f"only {len(allowed)} node(s) publish {GPU_CLASS} devices enough that match its claims' "
                              f"requests {names}")
        return gpus, frozenset(allowed), "; ".join(why) or None

    def request_selectors(self, request: Request) -> tuple:
        return (*class_selectors(self.classes.get(request.device_class)), *request.selectors)

    # -- the node's devices in use ---------------------------------------------------------------

    def taken_on(self, node: str, but: Iterable[str] = ()) -> set[str]:
        """The devices of ``node`` allocated to claims (other than the keys in ``but``)."""
        skip = set(but)
        out: set[str] = set()
        for key, obj in self.claims.items():
            if key in skip or allocated_node(obj) != node:
                continue
            reserved = {r.get("uid") for r in (obj.get("status") or {}).get("reservedFor") or [] if isinstance(r, dict)}
            if reserved and reserved <= self.gone:
                continue  # reserved only for pods that ended: being freed
            for r in (((obj.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []:
                if isinstance(r, dict) and r.get("driver") == GPU_DRIVER and not r.get("adminAccess"):
                    out.add(str(r.get("device")))
        return out


def _older(obj: dict[str, Any], known: dict[str, Any] | None) -> bool:
    """Whether ``obj`` is an older version of ``known`` (as kube-scheduler's assume cache reads
    resourceVersions: as whole numbers, where both are; an object made anew has another uid)."""
    if known is None:
        return False
    new_meta, old_meta = obj.get("metadata") or {}, known.get("metadata") or {}
    if new_meta.get("uid") != old_meta.get("uid"):
        return False
    try:
        return int(new_meta.get("resourceVersion", "")) < int(old_meta.get("resourceVersion", ""))
    except ValueError:
        return False


def _named_claims(pod: dict[str, Any] | None) -> list[str]:
    """The claims a pod names directly (``ns/name``; a template's claim is its own)."""
    if pod is None:
        return []
    ns = (pod.get("metadata") or {}).get("namespace", "default")
    return [f"{ns}/{e['resourceClaimName']}" for e in (pod.get("spec") or {}).get("resourceClaims") or []
            if isinstance(e, dict) and isinstance(e.get("resourceClaimName"), str)]


def choose(index: DraIndex, requests: Sequence[Request], devices: Sequence[Device], prefer: Sequence[int],
           taken: set[str], constraints: Sequence[MatchAttribute | DistinctAttribute] = ()) -> dict[str, list[Device]] | None:
    """Devices for each request (by name) from ``devices``, none in ``taken``, the GPUs in
    ``prefer`` first (in that order), then by index; None when a request cannot be met. With
    ``matchAttribute`` constraints, each value of the attribute is tried (the one holding the
    most preferred GPUs first) with the constrained requests' devices limited to it. With
    ``distinctAttribute`` constraints, devices are taken in that order skipping one whose value
    a device already taken for them has (greedy: a claim whose requests could be met only by
    another choice among them waits), and the whole answer is checked against them. Raises
    ``SelectorError`` for a selector that cannot say."""
    distinct = tuple(c for c in constraints if isinstance(c, DistinctAttribute))
    if distinct:
        got = _choose_matching(index, requests, devices, prefer, taken,
                               [c for c in constraints if isinstance(c, MatchAttribute)], distinct)
        return got if got is not None and all(_distinct(got, c) for c in distinct) else None
    return _choose_matching(index, requests, devices, prefer, taken, list(constraints), ())


def _distinct(got: dict[str, list[Device]], constraint: DistinctAttribute) -> bool:
    values = [constraint.value(d) for name, found in got.items() if constraint.covers(name) for d in found]
    return None not in values and len(values) == len(set(map(repr, values)))


def _choose_matching(index: DraIndex, requests: Sequence[Request], devices: Sequence[Device], prefer: Sequence[int],
                     taken: set[str], constraints: Sequence[MatchAttribute],
                     distinct: tuple[DistinctAttribute, ...]) -> dict[str, list[Device]] | None:
    """``choose``, its ``matchAttribute`` constraints one after another."""
    if not constraints:
        return _choose(index, requests, devices, prefer, taken, distinct)
    first, rest = constraints[0], constraints[1:]
    covered = set(first.requests) or {r.name for r in requests}
    values = {first.value(d) for d in devices if first.value(d) is not None}
    wanted = set(prefer)
    for value in sorted(values, key=lambda v: (-sum(1 for d in devices if first.value(d) == v and d.index in wanted), str(v))):
        # a device without the attribute, or with another value, cannot serve a covered request
        allowed = [d for d in devices if first.value(d) == value]
        got = _split(index, requests, covered, devices, allowed, prefer, taken, rest, distinct)
        if got is not None:
            return got
    return None


def _split(index: DraIndex, requests: Sequence[Request], covered: set[str], devices: Sequence[Device],
           allowed: Sequence[Device], prefer: Sequence[int], taken: set[str],
           rest: Sequence[MatchAttribute], distinct: tuple[DistinctAttribute, ...]) -> dict[str, list[Device]] | None:
    """``choose`` with the covered requests on ``allowed`` and the others on every device."""
    inside = [r for r in requests if r.name in covered]
    outside = [r for r in requests if r.name not in covered]
    got = _choose_matching(index, inside, allowed, prefer, taken,
                           [c for c in rest if not c.requests or set(c.requests) <= covered], distinct)
    if got is None:
        return None
    used = taken | {d.name for found in got.values() for d in found}
    more = _choose_matching(index, outside, devices, prefer, used,
                            [c for c in rest if c.requests and not set(c.requests) <= covered], distinct)
    if more is None:
        return None
    return {**got, **more}  # keyed by the name each result carries (a subrequest's, for firstAvailable)


def _choose(index: DraIndex, requests: Sequence[Request], devices: Sequence[Device], prefer: Sequence[int],
            taken: set[str], distinct: tuple[DistinctAttribute, ...] = ()) -> dict[str, list[Device]] | None:
    rank = {i: n for n, i in enumerate(prefer)}
    ordered = sorted(devices, key=lambda d: (rank.get(d.index, len(rank)) if d.index is not None else 1 << 30, d.index or 0))
    used = set(taken)
    seen: list[set[str]] = [set() for _ in distinct]  # per distinctAttribute, the values taken
    out: dict[str, list[Device]] = {}

    def pick(name: str, matching: list[Device], count: int | None) -> list[Device] | None:
        """``count`` devices of ``matching`` in order (None: all of them), each with values of
        the distinct attributes that bind ``name`` that no device taken for them has."""
        binding = [n for n, c in enumerate(distinct) if c.covers(name)]
        if not binding:
            return matching if count is None else (matching[:count] if len(matching) >= count else None)
        got: list[Device] = []
        for d in matching:
            values = [repr(distinct[n].value(d)) if distinct[n].value(d) is not None else None for n in binding]
            if None in values or any(v in seen[n] for n, v in zip(binding, values)):
                if count is None:
                    return None  # All: every matching device, so each must be distinct
                continue
            got.append(d)
            for n, v in zip(binding, values):
                seen[n].add(v)
            if count is not None and len(got) == count:
                return got
        return got if count is None and got else None

    for r in requests:
        if r.alternatives:
            # firstAvailable: the first subrequest the node's free devices can serve (its name,
            # ``<request>/<subrequest>``, is the one the allocation result carries)
            for alternative in r.alternatives:
                selectors = index.request_selectors(alternative)
                matching = [d for d in ordered if d.name not in used and alternative.may_use(d)
                            and index.selectors.matches(selectors, d)]
                before = [set(s) for s in seen]
                found = pick(alternative.name, matching, alternative.count)
                if found is not None:
                    out[alternative.name] = found
                    used.update(d.name for d in found)
                    break
                seen = before  # what the alternative tried is not taken
            else:
                return None
            continue
        selectors = index.request_selectors(r)
        # admin access: any matching device, whoever holds it, and it stays free for the others
        matching = [d for d in ordered if (r.admin or d.name not in used) and r.may_use(d)
                    and index.selectors.matches(selectors, d)]
        if r.mode == AllocationMode.ALL:
            if not matching or (not r.admin and any(d.name in taken and index.selectors.matches(selectors, d) for d in devices)):
                return None
            found = pick(r.name, matching, None)
        else:
            found = pick(r.name, matching, r.count)
        if found is None:
            return None
        out[r.name] = found
        if not r.admin:
            used.update(d.name for d in found)
    return out
