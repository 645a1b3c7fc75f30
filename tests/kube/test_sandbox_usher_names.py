"""The sandbox spells usher's user-facing names (labels, annotations, its ConfigMaps) on its own,
so that it never imports usher's kube backend; these must stay the strings usher reads, or a
scenario served by the sandbox would not be the one usher schedules."""

from __future__ import annotations

from usher.engine.backends.kube import names, rbac
from usher.sandbox import usher_names


def test_the_sandboxs_labels_and_annotations_are_the_ones_usher_reads() -> None:
    for ours, theirs in ((usher_names.Label, names.Label), (usher_names.Annotation, names.Annotation)):
        for member in ours:
            assert theirs[member.name] == member.value, f"{ours.__name__}.{member.name}"


def test_the_sandboxs_scheduler_resource_and_configmap_names_are_ushers() -> None:
    assert (usher_names.SCHEDULER_NAME, usher_names.GPU_RESOURCE) == (names.SCHEDULER_NAME, names.GPU_RESOURCE)
    for constant in ("USHER_NAMESPACE", "QUEUES_CONFIGMAP", "QUEUES_CONFIG_KEY", "DECISIONS_CONFIGMAP", "DECISIONS_CONFIG_KEY"):
        assert getattr(usher_names, constant) == getattr(rbac, constant), constant
