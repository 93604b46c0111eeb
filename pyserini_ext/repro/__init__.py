"""The reproduction harness (as Pyserini's two-click reproductions): the conditions file `conditions.yaml` holds
every command the report runs, as templates, and the figures each condition gave; `python -m pyserini_ext.repro`
(`make report`) runs them all and writes docs/report.md; `pyserini-ext repro --check` reruns those of some
datasets and fails on a figure outside the tolerance.

conditions.py  the conditions file: loading, template expansion, expected figures and the tolerance check
runner.py      the cached step runner (skip a step whose output exists; log, time, show paths relative)
pipeline.py    corpora, the conditions' steps, scoring, DeepCT's settings chosen on development queries
render.py      docs/report.md and its plots
"""
from pyserini_ext.repro.conditions import Conditions, Failure, load_conditions

__all__ = ["Conditions", "Failure", "load_conditions"]  # the runs: pyserini_ext.repro.pipeline (imports faiss, torch)
