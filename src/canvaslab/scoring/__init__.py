"""Scoring generated answers: probe suites, answer extraction, scorers, and the sandbox for generated code.

Used by the commit-order study (``canvaslab.studies.commit_order``) and by the evaluation of trained models
(``canvaslab.training.evaluate``); it needs neither torch nor a model.

- ``scoring.probes``     probe suites per regime (math, code, factual, open-ended, JSON), extraction, scorers
- ``scoring.sandbox``    runs model-written code in an isolated, resource-bounded process
- ``scoring.prompting``  a probe's text as a model's input (its chat template, when it has one)
"""
