"""The plugin API's config-section base, defined in engine.core.sections beside the core's own sections."""

from engine.core.sections import MAX_SEED, MAX_VAL_SAMPLES, Section

__all__ = ["MAX_SEED", "MAX_VAL_SAMPLES", "Section"]
