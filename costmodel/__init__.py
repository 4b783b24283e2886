"""plansweep's cost core: frozen specs in, whole columns of metrics out."""

from costmodel._errors import InputError

__all__ = ["InputError"]
