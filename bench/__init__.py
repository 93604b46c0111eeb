"""The benchmarks that `make bench` runs (bench/make_report.py), each printing ours beside a baseline as ratios.

Run one from the repository root as a module, e.g. `python -m bench.bench_aggretriever --passages 200`; what they
share is bench/common.py. The GPU checks are in bench/gpu/ (docs/gpu.md). Not installed with the package.
"""
