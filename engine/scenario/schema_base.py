"""The base of every scenario model, and the label selector several of them share.

Apart from ``models`` so that the models of a job's pod rules (``job_rules``) and those of the
rest of the file (``models``) can both build on them without importing each other.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from ..selectors import SelectorOperator, selects

__all__ = ["LabelSelector", "SchemaModel", "SelectorTerm"]


class SchemaModel(BaseModel):
    """Base of every scenario model: camelCase YAML names, unknown fields refused."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel)



class SelectorTerm(SchemaModel):
    """One ``matchExpressions`` term of a label selector."""

    key: str = Field(min_length=1)
    operator: SelectorOperator
    values: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> SelectorTerm:
        wants = self.operator in (SelectorOperator.IN, SelectorOperator.NOT_IN)
        if wants and not self.values:
            raise ValueError(f"operator {self.operator} needs a non-empty values list")
        if not wants and self.values:
            raise ValueError(f"operator {self.operator} takes no values")
        return self


class LabelSelector(SchemaModel):
    """A Kubernetes label selector; ``{}`` selects everything."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: list[SelectorTerm] = Field(default_factory=list)

    def matches(self, labels: dict[str, str]) -> bool:
        return selects(self.match_labels, ((t.key, t.operator, t.values) for t in self.match_expressions), labels)
