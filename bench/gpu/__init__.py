"""The GPU checks, in one place (CUDA only, not part of `make bench`): `bash bench/gpu/check.sh encode|train ...`
runs encode.py (every shipped encoder on CUDA against the CPU) or train.py (every trainer on CUDA beside the CPU);
docs/gpu.md says how and what they printed.
"""
