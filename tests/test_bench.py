"""bench/ as a suite: it holds only what `make bench` runs, its scripts share one helper module, and `make bench`'s
quick mode (`python -m bench.make_report --quick`) runs every benchmark end to end, each printing its ratios."""
from __future__ import annotations

import ast
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
HELPERS = {"__init__", "common", "make_report"}  # bench/'s modules that are no benchmark of their own


def strings(path: Path) -> set[str]:
    return {node.value for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.Constant)
            and isinstance(node.value, str)}


def test_bench_holds_only_what_make_bench_runs():
    """Every bench/*.py is a helper, a benchmark that make_report.py names, or a per-model scale script that
    bench_scale.py names (make_report runs bench_scale)."""
    run = strings(BENCH / "make_report.py")
    scale_scripts = {name.removeprefix("bench.") for name in strings(BENCH / "bench_scale.py")
                     if name.startswith("bench.scale_")}
    assert "bench_scale" in run and scale_scripts >= {"scale_aligner", "scale_deepct", "scale_aggretriever"}
    stray = [path.name for path in BENCH.glob("*.py")
             if path.stem not in HELPERS | run | scale_scripts]
    assert not stray, f"bench/ scripts that `make bench` never runs (one-offs go to the experiments folder): {stray}"


def test_benchmarks_share_one_helper_module_and_edit_no_sys_path():
    for path in sorted(BENCH.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", "") == "sys":
                raise AssertionError(f"{path.relative_to(ROOT)} uses sys.path (run it as python -m bench.<name>)")
            if isinstance(node, ast.ImportFrom) and node.level:
                raise AssertionError(f"{path.relative_to(ROOT)}: a relative import")
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
            for name in names:
                top = name.split(".")[0]
                # another script of bench/ by its bare name, or any bench module but the helpers
                assert not (BENCH / f"{top}.py").is_file(), f"{path.relative_to(ROOT)} imports {name}"
                if top == "bench":
                    assert name in ("bench.common", "bench.gpu.encode"), f"{path.relative_to(ROOT)} imports {name}"


def finite(value) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One quick run of `make bench`, into a temporary folder (docs/ untouched)."""
    out = tmp_path_factory.mktemp("bench")
    done = subprocess.run([sys.executable, "-m", "bench.make_report", "--quick", "--output-dir", str(out),
                           "--json", str(out / "figures.json")], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=3600)
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "figures.json").read_text()), done.stdout


@pytest.mark.slow  # 4-6 minutes: ten benchmarks, each starting Python, torch and its models (make test-slow)
def test_quick_bench_runs_every_benchmark_and_prints_its_ratios(quick):
    out, report, printed = quick
    figures = report["figures"]
    assert report["quick"] and set(figures) == {
        "aggretriever-128", "query-latency", "precision", "aligner-search", "train-step", "ray", "deepct-index",
        "server", "startup"}

    encoding = figures["aggretriever-128"]["sides"]
    assert set(encoding) == {"pyserini", "ours torch fp32"} and encoding["pyserini"]["speedup"] == 1.0
    assert finite(encoding["ours torch fp32"]["speedup"]) and encoding["ours torch fp32"]["speedup"] > 0
    assert encoding["ours torch fp32"]["max_abs_diff"] < 1e-4  # the same vectors as Pyserini's encoder, in float32
    latency = figures["query-latency"]["sides"]["ours torch fp32"]
    assert finite(latency["p50_ratio"]) and latency["p50_ratio"] > 0

    precision = figures["precision"]["rows"]["Aggretriever"]
    assert 0 < precision["torch fp32"]["ndcg10"] <= 1 and precision["torch fp32"]["max_abs_diff"] == 0
    assert finite(precision["onnx int8"]["delta_points"]) and abs(precision["onnx int8"]["delta_points"]) < 15

    aligner = figures["aligner-search"]["rows"]
    assert aligner["AligneR exact (float16, flat)"]["delta_points"] == 0
    assert all(finite(row["p50_ratio"]) and 0 <= row["ndcg10"] <= 1 for row in aligner.values())
    compressed = [row for name, row in aligner.items() if name.startswith("AligneR pq")]
    assert compressed and all(finite(row["bytes_per_token"]) and row["bytes_per_token"] > 0 for row in compressed)

    step = figures["train-step"]["fp32"]
    # the sparse backward against autograd, float32: 1.2e-3 apart on the default model, 0.04 on splade-tiny's (a
    # slice maximum's near-ties send the gradient to another entry), where a wrong backward is off by the gradient
    assert finite(step["speedup"]) and step["speedup"] > 0 and step["max_grad_diff"] < 0.5
    assert figures["ray"]["max_abs_diff"] < 1e-4  # one worker and two: the same vectors (other batches: 2e-5)
    deepct = figures["deepct-index"]
    assert all(finite(deepct[key]) and deepct[key] > 0 for key in (
        "pseudo_over_custom_time", "pseudo_over_custom_size", "deepct_over_bm25_time"))
    server = figures["server"]
    assert finite(server["p50_ratio_server_over_api"]) and finite(server["throughput_ratio_server_over_api"])
    startup = figures["startup"]["commands"]["pyserini.encode --help"]
    assert finite(startup["on_over_off"]) and startup["on_over_off"] > 0

    # the scaling curves: DeepCT's text build at 1,000 passages, searched and checked against exhaustive scoring
    rows = json.loads((out / "scale-results.json").read_text())["deepct"]
    assert [(r["N"], r["source"]) for r in rows] == [(1000, "text")]
    assert rows[0]["p50_ms"] > 0 and rows[0]["index_mb"] > 0 and 0.9 <= rows[0]["recall_at_10_vs_exact"] <= 1
    assert "| deepct | bm25 | 1000 | text |" in (out / "scale-results.md").read_text()

    page = (out / "bench-results.md").read_text()
    assert (out / "bench.png").is_file() and str(ROOT) not in page
    for module in ("bench_aggretriever", "bench_query_latency", "bench_precision_quality", "bench_aligner_search",
                   "bench_aggretriever_train_step", "bench_scale_ray", "bench_deepct_index", "bench_server",
                   "bench_startup"):
        assert f"$ python -m bench.{module} " in page and f"$ python -m bench.{module} " in printed


def test_a_steps_peak_rss_is_its_own_not_the_drivers():
    """wait4 on a fork + exec of a large driver reads the driver's high-water mark; measure's launcher does not."""
    from bench.common import measure, python

    driver = bytearray(600 * 2**20)
    driver[::4096] = b"\1" * len(driver[::4096])  # touched: resident
    step = "import json; x = bytearray(100 * 2**20); x[::4096] = b'1' * len(x[::4096]); print(json.dumps({'n': 1}))"
    found = measure([python(), "-c", step])
    assert found["n"] == 1 and 100 < found["peak_rss_mb"] < 400, found
    with pytest.raises(RuntimeError, match="failed with exit code 3$"):
        measure([python(), "-c", "raise SystemExit(3)"])
    del driver
