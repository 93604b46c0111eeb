"""`make demo`'s step runner: the terminal sees the command and its progress bar, the log sees everything."""
from __future__ import annotations

import io
import sys

import pytest

from pyserini_ext.demo import run_step

STEP = """
import sys, time
from tqdm import tqdm
print("INFO some library: " + "loading", flush=True)
for _ in tqdm(range(4), desc="encode", mininterval=0):
    time.sleep(0.05)
open(sys.argv[1], "w").write("done")
"""


def test_step_shows_command_and_bar_and_logs_everything(tmp_path):
    output, log, terminal = tmp_path / "out.txt", tmp_path / "commands.log", io.StringIO()
    run_step([sys.executable, "-c", STEP, str(output)], output, log, terminal)
    shown = terminal.getvalue()
    assert shown.startswith(f"$ {sys.executable} -c ") and output.read_text() == "done"
    bars = [line for line in shown.replace("\r", "\n").splitlines() if "encode:" in line]
    assert bars[-1].startswith("  encode: 100%|") and "4/4 [" in bars[-1] and "<00:00" in bars[-1]
    assert "library: loading" not in shown and "done in" in shown
    logged = log.read_text()
    assert "INFO some library: loading" in logged and "encode: 100%" in logged
    assert not (tmp_path / "out.txt.partial").exists()

    run_step([sys.executable, "-c", "raise SystemExit(3)", str(output)], output, log, terminal)  # reused, not rerun
    assert f"[reuse] {output}" in terminal.getvalue()
    failing = tmp_path / "fail.txt"
    with pytest.raises(SystemExit, match="step failed \\(3\\)"):
        run_step([sys.executable, "-c", "print('boom'); raise SystemExit(3)", str(failing)], failing, log, terminal)
    assert "boom" in log.read_text() and not failing.exists()
