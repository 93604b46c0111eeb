"""Start-up cost of our hook: `python -m pyserini.encode --help` and `python -m pyserini.search.faiss --help`,
with the hook on and off (`PYSERINI_EXT_DISABLE=1`), same interpreter, runs interleaved, medians and ratios.

Pyserini cannot start on the bundled Java runtime without the hook (its JVM option `--add-modules
jdk.incubator.vector` aborts there), so both modes run on one Java 21+ runtime that has that module (`--java-home`,
else the first such runtime found in $JAVA_HOME or /usr/lib/jvm), with the same OPENAI_API_KEY placeholder:
the only difference between the modes is our hook. Our share = (on - off) / on, from the CPU time (user + sys)
of the command and its children: on a shared machine wall time mostly measures the neighbours (printed too).
Pyserini's own start-up is the rest, reported, not changed.

    python -m bench.bench_startup [--runs 5] [--java-home DIR]
"""
from __future__ import annotations

import argparse
import glob
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import java_bridge
from bench.common import write_json
from pyserini_ext._startup import OPENAI_PLACEHOLDER

COMMANDS = {"pyserini.encode --help": ["-m", "pyserini.encode", "--help"],
            "pyserini.search.faiss --help": ["-m", "pyserini.search.faiss", "--help"]}
TARGET_SHARE = 0.10


def java_home_with_vector_module() -> Path:
    candidates = [os.environ.get("JAVA_HOME", ""), *sorted(glob.glob("/usr/lib/jvm/*"), reverse=True)]
    for home in filter(None, candidates):
        if (java_bridge.java_major_version(home) or 0) >= java_bridge.MIN_JAVA_MAJOR and \
                java_bridge.runtime_has_vector_module(home):
            return Path(home)
    raise SystemExit("no Java 21+ runtime with jdk.incubator.vector found; pass --java-home")


def timed_run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(CPU seconds, wall seconds) of `python argv...`, its child processes included."""
    before, start = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    proc = subprocess.run([sys.executable, *argv], env=env, capture_output=True, text=True)
    wall, after = time.perf_counter() - start, resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0 or "usage" not in proc.stdout.lower():
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--java-home", type=Path)
    parser.add_argument("--commands", nargs="+", choices=COMMANDS, default=list(COMMANDS), help="default: both")
    parser.add_argument("--json", help="also write the figures to this file (for `make bench`)")
    args = parser.parse_args()
    java_home = args.java_home or java_home_with_vector_module()
    base = {**os.environ, "JAVA_HOME": str(java_home), "OPENAI_API_KEY": OPENAI_PLACEHOLDER,
            "PATH": os.pathsep.join([str(java_home / "bin"), os.environ.get("PATH", "")])}
    modes = {"off": {**base, "PYSERINI_EXT_DISABLE": "1"}, "on": {k: v for k, v in base.items()
                                                                  if k != "PYSERINI_EXT_DISABLE"}}
    print(f"interpreter {sys.executable}; Java {java_home}; {args.runs} runs per mode, interleaved")
    figures = {}
    for name, argv in ((name, COMMANDS[name]) for name in args.commands):
        cpu: dict[str, list[float]] = {"off": [], "on": []}
        wall: dict[str, list[float]] = {"off": [], "on": []}
        timed_run(argv, modes["on"])  # warm the file cache and byte-code once, not timed
        for _ in range(args.runs):
            for mode, env in modes.items():
                seconds, elapsed = timed_run(argv, env)
                cpu[mode].append(seconds)
                wall[mode].append(elapsed)
        off, on = statistics.median(cpu["off"]), statistics.median(cpu["on"])
        wall_off, wall_on = statistics.median(wall["off"]), statistics.median(wall["on"])
        print(f"{name:<30} CPU: hook off {off:6.2f} s, hook on {on:6.2f} s, on/off {on / off:5.3f}, our share "
              f"{100 * (on - off) / on:5.1f}% (target <= {100 * TARGET_SHARE:.0f}%), Pyserini's own {off:.2f} s | "
              f"wall median off {wall_off:.2f} s, on {wall_on:.2f} s | CPU runs off "
              f"{[round(t, 2) for t in cpu['off']]} on {[round(t, 2) for t in cpu['on']]}", flush=True)
        figures[name] = {"cpu_off_s": off, "cpu_on_s": on, "on_over_off": on / off, "our_share": (on - off) / on}
    write_json(args.json, {"runs": args.runs, "commands": figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
