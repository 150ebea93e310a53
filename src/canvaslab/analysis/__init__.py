"""Measures computed from study outputs (trace files, result tables); no model needed."""
