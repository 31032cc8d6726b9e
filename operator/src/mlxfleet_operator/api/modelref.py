"""`ModelRef`: which weights, as one value (source + revision) from the API to core to adapters.

The CRDs carry a model in two wire shapes, both named after their place in the schema:
`ModelDeployment.spec.model` (`deploymentspec.ModelSpec`: source, revision and the served name)
and `SwapPlan.spec.target` (`swapplan.SwapTarget`: source and revision, immutable). The agent
reports models the same way (slots, cached models, swap records). Everything past the boundary
speaks `ModelRef`: placement compares them, a SwapPlan's steps record them, the agent client
asks for them. Build one with `ModelRef.of(x)` from anything that has `source` and `revision`.
Validation of the text (schemes, patterns) stays with the wire shapes (`fields.ModelSource`);
a `ModelRef` is never re-validated, so what an agent reports can always be held in one.
May import: the standard library only. Called by: api kinds, core, adapters and handlers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


class HasModel(Protocol):
    """A wire object naming a model: a ModelSpec, a SwapTarget, an agent slot or cached model."""

    @property
    def source(self) -> str: ...

    @property
    def revision(self) -> str | None: ...


@dataclass(frozen=True)
class ModelRef:
    """One model: where the weights come from and which revision (None: the latest)."""

    source: str
    revision: str | None = None

    @classmethod
    def of(cls, obj: HasModel) -> ModelRef:
        return cls(obj.source, obj.revision)

    @property
    def key(self) -> str:
        """The one text form, `source@revision` (the source alone for the latest revision)."""
        return f"{self.source}@{self.revision}" if self.revision else self.source

    def __str__(self) -> str:
        return self.key
