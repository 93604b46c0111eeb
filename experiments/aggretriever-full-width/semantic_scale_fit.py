"""How large the teacher ensemble's score spread is against MiniLM's cosines over the same candidates: the
least-squares slope of the ensemble's per-query centred scores on MiniLM's centred cosines (over all training
queries). Its square root is a semantic scale at which the frozen semantic part alone spans the target's range."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from pyserini_ext.train.distill import DistillDataConfig, build_distillation_set

data = build_distillation_set(DistillDataConfig(), Path("runs/models/distillation"))
ensemble = data.ensemble()
num = den = 0.0
spread_cos, spread_ens = [], []
for cos, target in zip(data.scores["minilm"], ensemble):
    c, t = cos - cos.mean(), target - target.mean()
    num += float(c @ t)
    den += float(c @ c)
    spread_cos.append(cos.std())
    spread_ens.append(target.std())
slope = num / den
print(f"slope {slope:.2f} (sqrt {np.sqrt(slope):.2f}); mean per-query std: cosine {np.mean(spread_cos):.4f}, "
      f"ensemble {np.mean(spread_ens):.4f}, ratio {np.mean(spread_ens) / np.mean(spread_cos):.2f}")
