"""The commit-order study (seed 003): in what order the sampler commits canvas positions.

``canvaslab.capture.commit_trace`` defines the trace file a tracer writes and
``canvaslab.analysis.order_metrics`` measures. Nothing is imported here, so importing one part of the
study (e.g. the probes) does not pay for pyarrow, scipy or scikit-learn.
"""
