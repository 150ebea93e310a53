"""Capture of row 0's module and op outputs, and byte-exact comparison against a reference run; the
commit-order trace format (``commit_trace``)."""

from canvaslab.capture.compare import Comparison, compare_captures, detail
from canvaslab.capture.recorder import Capture, Recorder

__all__ = ["Capture", "Comparison", "Recorder", "compare_captures", "detail"]
