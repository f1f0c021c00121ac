"""The strict base every config section derives from, shared by the core's sections and the tasks' own.

Torch-free: a task's ``spec.py`` imports it to declare its section without importing the engine's
config loader (which imports the task registry).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

#: Largest seed: torch.manual_seed takes a signed 64-bit value at most (2**64 raised OverflowError mid-setup).
MAX_SEED = 2**63 - 1
#: Most validation samples: every eval runs them all (10**12 was accepted and never finished an eval).
MAX_VAL_SAMPLES = 1_000_000


class Section(BaseModel):
    """Strict base: unknown keys are errors and values are re-validated on assignment."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, strict=False)

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: Any, info) -> Any:
        # Lax mode would read `batch_size = true` as 1; a boolean where a number belongs is a mistake.
        if isinstance(value, bool):
            annotation = cls.model_fields[info.field_name].annotation
            if annotation in (int, float) or (annotation is not bool and float in getattr(annotation, "__args__", ())):
                raise PydanticCustomError("bool_not_number", "expected a number, not true/false")
        return value
