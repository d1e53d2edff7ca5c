"""The prioritizer daemon: the cycle, the scheduler loop and the preemption state machine."""

from .cycle import CycleReport, Prioritizer

__all__ = ["CycleReport", "Prioritizer"]
