"""plansweep's cost core: frozen specs in, whole columns of metrics out."""

from costmodel._errors import InputError
from costmodel._pipeline import SCHEDULES, PipelineResult, Timeline, simulate

__all__ = ["InputError", "SCHEDULES", "PipelineResult", "Timeline", "simulate"]
