"""Scenario files: the pydantic schema, the YAML loader with line numbers, and trace import.

`load_scenario(path)` / `parse_scenario(text)` give a `Scenario` whose values are canonical
(seconds, millicores, bytes) or raise `ScenarioError` listing every `Problem` with its YAML
path and line. Quantity helpers live in `usher.engine.scenario.quantity`.
"""

from .errors import Problem, ScenarioError
from .loader import load_scenario, parse_queue_config, parse_queue_config_async, parse_scenario
from .models import (
    HOSTNAME_LABEL,
    Approval,
    BorrowWithinCohortPolicy,
    EventAction,
    EventSpec,
    JobSpec,
    NodeGroup,
    NodeSpec,
    NodeTemplate,
    PodSpec,
    PodTopology,
    Preemption,
    QueueSpec,
    ReclaimWithinCohortPolicy,
    Resources,
    Scenario,
    TopologyMode,
    TopologySpec,
    TraceFormat,
    TraceSpec,
    WithinQueuePolicy,
)

__all__ = [
    "HOSTNAME_LABEL",
    "Approval",
    "BorrowWithinCohortPolicy",
    "EventAction",
    "EventSpec",
    "JobSpec",
    "NodeGroup",
    "NodeSpec",
    "NodeTemplate",
    "PodSpec",
    "PodTopology",
    "Preemption",
    "Problem",
    "QueueSpec",
    "ReclaimWithinCohortPolicy",
    "Resources",
    "Scenario",
    "ScenarioError",
    "TopologyMode",
    "TopologySpec",
    "TraceFormat",
    "TraceSpec",
    "WithinQueuePolicy",
    "load_scenario",
    "parse_queue_config",
    "parse_queue_config_async",
    "parse_scenario",
]
