"""Torch modules only: Aggretriever, DeepCT, AligneR (+ their save/load)."""
