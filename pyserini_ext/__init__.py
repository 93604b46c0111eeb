"""pyserini-ext: Aggretriever, DeepCT and AligneR for Pyserini.

Kept import-free on purpose: `pyserini_ext._startup` runs at every interpreter start.
"""
__version__ = "0.1.0"
