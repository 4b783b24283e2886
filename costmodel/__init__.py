"""plansweep's cost core: frozen specs in, whole columns of metrics out."""

from costmodel._errors import InputError
from costmodel._pipeline import SCHEDULES, PipelineResult, Timeline, simulate
from costmodel._pipeline_render import chrome_trace, text_timeline

__all__ = [
    "InputError",
    "SCHEDULES",
    "PipelineResult",
    "Timeline",
    "simulate",
    "text_timeline",
    "chrome_trace",
]
