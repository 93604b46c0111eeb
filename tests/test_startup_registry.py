"""The start-up hook, JVM bridge and registration, exercised through real subprocesses and the real JVM."""
from __future__ import annotations

import json
import runpy
import subprocess
import sys
import zipfile
from pathlib import Path
from unittest import mock

import pytest

import java_bridge
from pyserini_ext import registry
from pyserini_ext.integration.encode import LazyEncoderClass

REPO = Path(__file__).resolve().parents[1]


def run_python(*args: str, check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, check=check, **kwargs)


def test_startup_sets_java_and_imports_nothing_heavy():
    code = ("import json, os, sys; print(json.dumps({'java_home': os.environ['JAVA_HOME'], "
            "'path0': os.environ['PATH'].split(os.pathsep)[0], 'openai': 'OPENAI_API_KEY' in os.environ, "
            "'heavy': [m for m in ('torch', 'pyserini', 'jnius', 'transformers', 'numpy') if m in sys.modules]}))")
    info = json.loads(run_python("-c", code).stdout)
    assert java_bridge.java_major_version(info["java_home"]) >= 21
    assert info["path0"] == str(Path(info["java_home"]) / "bin")
    assert info["openai"]
    assert info["heavy"] == []


def test_users_old_java_home_is_replaced_by_a_java21_runtime(tmp_path):
    old = tmp_path / "jdk17"
    (old / "lib" / "server").mkdir(parents=True)
    (old / "lib" / "server" / "libjvm.so").write_bytes(b"")
    (old / "release").write_text('JAVA_VERSION="17.0.15"\n')
    env = {"PATH": "/usr/bin:/bin", "JAVA_HOME": str(old), "HOME": str(tmp_path)}
    home = run_python("-c", "import os; print(os.environ['JAVA_HOME'])", env=env).stdout.strip()
    assert home != str(old) and java_bridge.java_major_version(home) >= 21


def test_vector_module_option_dropped_only_when_runtime_lacks_it(tmp_path):
    with_module = tmp_path / "with"
    with_module.mkdir()
    (with_module / "release").write_text('JAVA_VERSION="21.0.1"\nMODULES="java.base jdk.incubator.vector"\n')
    options = ["-Xmx1g", java_bridge.VECTOR_OPTION]
    assert java_bridge.filter_jvm_options(options, with_module) == options
    bundled = java_bridge.find_java_home()
    expected = options if java_bridge.runtime_has_vector_module(bundled) else ["-Xmx1g"]
    assert java_bridge.filter_jvm_options(options, bundled) == expected


def test_ctrl_c_reaches_python_once_the_jvm_runs():
    """The JVM is started with -Xrs: its own SIGINT handler (exit at once, status 130, no `finally`) would replace
    Python's; with -Xrs a Ctrl-C after the JVM started is a KeyboardInterrupt that Python's code handles."""
    code = ("import os, signal, time, jnius_config, java_bridge\n"
            "java_bridge.autoclass('io.anserini.search.SimpleSearcher')\n"
            "assert jnius_config.vm_running and '-Xrs' in jnius_config.get_options()\n"
            "try:\n"
            "    os.kill(os.getpid(), signal.SIGINT); time.sleep(5)\n"
            "except KeyboardInterrupt:\n"
            "    print('handled by Python')\n")
    proc = run_python("-c", code, check=False, timeout=300)
    assert (proc.returncode, proc.stdout.strip()) == (0, "handled by Python"), proc.stderr[-2000:]


def test_anserini_starts_through_plain_pyserini_lucene_cli(tmp_path):
    """`python -m pyserini.index.lucene` then `python -m pyserini.search.lucene`, unchanged, in subprocesses."""
    docs = tmp_path / "docs"
    docs.mkdir()
    records = [{"id": "d1", "contents": "lucene inverted index with bm25 scoring"},
               {"id": "d2", "contents": "dense vectors searched with faiss"},
               {"id": "d3", "contents": "bm25 bm25 bm25 and more bm25"}]
    (docs / "docs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    index = tmp_path / "index"
    run_python("-m", "pyserini.index.lucene", "--collection", "JsonCollection", "--input", str(docs),
               "--index", str(index), "--generator", "DefaultLuceneDocumentGenerator", "--threads", "1")
    topics = tmp_path / "topics.tsv"
    topics.write_text("q1\tbm25\nq2\tfaiss vectors\n")
    run = tmp_path / "run.txt"
    run_python("-m", "pyserini.search.lucene", "--index", str(index), "--topics", str(topics),
               "--output", str(run), "--bm25", "--hits", "10")
    lines = [line.split() for line in run.read_text().splitlines()]
    by_query = {}
    for qid, _, docid, rank, score, _ in lines:
        by_query.setdefault(qid, []).append((docid, int(rank), float(score)))
    assert [d for d, _, _ in by_query["q1"]] == ["d3", "d1"]  # higher tf of "bm25" first
    assert by_query["q2"][0][0] == "d2" and len(by_query["q2"]) == 1
    assert by_query["q1"][0][2] > by_query["q1"][1][2] > 0


def test_encoder_names_registered_in_pyserini_maps():
    import pyserini.encode as encode

    for name, entry in registry.ENCODERS.items():
        if entry.document:
            assert isinstance(encode.document_encoder_class_map[name], LazyEncoderClass)
        if entry.query:
            assert isinstance(encode.query_encoder_class_map[name], LazyEncoderClass)
    assert encode.query_encoder_class_map["aggretriever"].path.startswith("pyserini_ext.")


def run_module_as_main(module: str, argv: list[str], capsys) -> str:
    """What `python -m module argv...` does, in this process (Pyserini is imported once for all cases)."""
    with mock.patch.object(sys, "argv", [module, *argv]), pytest.raises(SystemExit):
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    return capsys.readouterr().err


@pytest.mark.parametrize("module,argv", [("pyserini.search.faiss", []), ("pyserini.search.hybrid", ["dense"]),
                                         ("pyserini.encode", ["encoder"])])
def test_cli_choices_accept_our_names(module, argv, capsys):
    for name in registry.ENCODERS:
        # other required arguments are missing, so argparse exits right after checking the choice
        err = run_module_as_main(module, [*argv, "--encoder-class", name], capsys)
        assert "invalid choice" not in err and "required" in err, err[-500:]
    err = run_module_as_main(module, [*argv, "--encoder-class", "no-such-encoder"], capsys)
    assert "invalid choice: 'no-such-encoder'" in err and "aggretriever" in err


def test_unknown_encoder_name_in_our_api_lists_the_known_names():
    with pytest.raises(registry.UnknownEncoderError, match="known: aggretriever"):
        registry.encoder_class("no-such-encoder")


def test_explicit_max_length_on_a_pyserini_command_line_is_remembered():
    # the parser is built by code that runs as a Pyserini module, as in `python -m pyserini.search.faiss`
    code = ("import argparse, pyserini.encode; from pyserini_ext.integration import arguments; "
            "build = \"p = argparse.ArgumentParser(); p.add_argument('--encoder-class', choices=['x']); "
            "p.add_argument('--max-length', type=int, default=256); p.add_argument('--dimension', type=int, "
            "default=768)\"; g = {'argparse': argparse, '__name__': 'pyserini.search.faiss.__main__'}; "
            "exec(build, g); p = g['p']; "
            "p.parse_args(['--encoder-class', 'aggretriever']); print(arguments.cli_max_length()); "
            "p.parse_args(['--max-length', '48']); "
            "print(arguments.cli_max_length(), arguments.cli_option('dimension'))")
    assert run_python("-c", code).stdout.split() == ["None", "48", "768"]


def test_argparse_patch_leaves_other_parsers_alone():
    """Issue 8, case 8: a parser of ours (or anyone's) with `--encoder-class` choices but no `--max-length`."""
    code = ("import argparse, pyserini.encode; from pyserini_ext.integration import arguments; "
            "p = argparse.ArgumentParser(); p.add_argument('--encoder-class', choices=['x']); "
            "print(p.parse_known_args(['--encoder-class', 'x', '--max-length', '5'])[1]); "
            "print(p._option_string_actions['--encoder-class'].choices, arguments.cli_max_length())")
    assert run_python("-c", code).stdout.split() == ["['--max-length',", "'5']", "['x']", "None"]


def test_wheel_ships_the_startup_hook(tmp_path):
    run_python("-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path), str(REPO),
               cwd=tmp_path)
    wheel = next(tmp_path.glob("pyserini_ext-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "pyserini_ext.pth" in names and "pyserini_ext/_startup.py" in names and "java_bridge/__init__.py" in names
    assert zipfile.ZipFile(wheel).read("pyserini_ext.pth").decode().strip() == "import pyserini_ext._startup"
