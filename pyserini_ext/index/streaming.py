"""Streaming index builds: one builder per model, used by the CLI, the Python API and Ray alike.

Documents come as a stream of (docid, {"title", "text"}) (a corpus file read line by line, any iterator; never a
dict of the whole corpus), are cut into chunks of `chunk_docs`, and each chunk's part of the index is written to
disk as it goes. Only the model-specific steps live in an `IndexBuilder`:

    prepare(sample, prepared)   train what needs training (quantizers, codecs) on the first documents; optional
    write_part(chunk, part)     encode one chunk and write its part of the index into the folder `part`
    finalise(parts, output)     join the parts, in order, into the index folder `output` (model outputs are never
                                gathered in memory: parts are read back one at a time, or merged by Faiss/Lucene)

The work folder `OUTPUT.building/` (settings.json, prepared/, parts/00000/, ...) holds the build while it runs;
a part counts once its `part.json` exists (written last), so an interrupted build resumes at the first missing
chunk with the same stream, and nothing in the work folder opens as an index. `finalise` writes `output`
through `atomic_output`; the work folder goes when the index is complete.

On Ray (`build_on_ray`), actors hold one builder each (one model load) and write their chunks' parts into the
same work folder (a shared file system on a cluster); the driver reads the stream, hands out chunks, keeps at
most two chunks per actor in flight, and finalises: it never holds model outputs.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import asdict
from itertools import islice
from pathlib import Path
from typing import ClassVar

import numpy as np
from tqdm.auto import tqdm

from pyserini_ext.data import check_id, check_output
from pyserini_ext.errors import InputError, OutputExistsError

Document = tuple[str, Mapping[str, str]]
PART_FILE = "part.json"
SETTINGS_FILE = "settings.json"
PREPARED_DONE = "prepared.json"
DEFAULT_CHUNK_DOCS = 16384


class IndexBuilder(ABC):
    """One model's streaming index build (see the module docstring). Subclasses set `kind` and take their
    settings as one dataclass (`self.settings`), which the index metadata stores."""
    kind: ClassVar[str]
    # documents of the first pass (`prepare`); 0: the builder needs no first pass
    sample_docs: int = 0

    def __init__(self, model: str, settings: object, runtime: Mapping | None = None):
        self.model, self.settings, self.runtime = str(model), settings, dict(runtime or {})

    def describe(self) -> dict:
        """What a resumed build must share with the interrupted one (settings.json)."""
        return {"kind": self.kind, "model": self.model, "settings": _plain(self.settings)}

    def prepare(self, sample: list[Document], prepared: Path, total_documents: int | None) -> None:
        """Train what the parts need on the first documents, into `prepared` (default: nothing to train)."""
        return None

    @abstractmethod
    def write_part(self, documents: list[Document], part: Path, prepared: Path) -> dict:
        """Encode `documents` and write their part of the index into the (existing, empty) folder `part`; return
        small counts (documents, tokens, ...), which go into part.json."""

    @abstractmethod
    def finalise(self, parts: list[Path], output: Path, prepared: Path, overwrite: bool) -> Path:
        """Join the parts (in corpus order) into the index folder `output`, atomically; return it."""

    def owns(self, folder: Path) -> bool:
        """Whether an existing `output` is an index of this kind (only such a folder is replaced on overwrite)."""
        return False


def _plain(settings: object) -> object:
    return asdict(settings) if hasattr(settings, "__dataclass_fields__") else settings


def chunks(documents: Iterable[Document], size: int) -> Iterator[list[Document]]:
    iterator = iter(documents)
    while chunk := list(islice(iterator, size)):
        yield chunk


def work_folder(output: str | os.PathLike) -> Path:
    output = Path(output)
    return output.with_name(output.name + ".building")


class BuildState:
    """The work folder of one build: settings, the first pass, and which parts are complete."""

    def __init__(self, builder: IndexBuilder, output: Path, chunk_docs: int, resume: bool):
        self.builder, self.output, self.chunk_docs = builder, Path(output), chunk_docs
        self.folder = work_folder(output)
        self.prepared = self.folder / "prepared"
        described = {**builder.describe(), "chunk_docs": chunk_docs}
        settings_file = self.folder / SETTINGS_FILE
        if self.folder.exists():
            recorded = _read_json(settings_file)
            if not resume:
                shutil.rmtree(self.folder)
            elif recorded != json.loads(json.dumps(described)):
                raise OutputExistsError(
                    f"{self.folder}: an interrupted build with other settings (or another model) is there; delete "
                    "it, or resume it with the same settings")
        self.folder.mkdir(parents=True, exist_ok=True)
        if not settings_file.is_file():
            write_json(settings_file, described)
        (self.folder / "parts").mkdir(exist_ok=True)

    def part(self, number: int) -> Path:
        return self.folder / "parts" / f"{number:05d}"

    def complete(self, number: int) -> bool:
        return (self.part(number) / PART_FILE).is_file()

    def is_prepared(self) -> bool:
        return (self.prepared / PREPARED_DONE).is_file()

    def run_prepare(self, sample: list[Document], total: int | None, prepare=None) -> None:
        """The builder's first pass, unless a resumed build already has it (`prepare`: run it elsewhere, Ray)."""
        if self.builder.sample_docs == 0 or self.is_prepared():
            return
        shutil.rmtree(self.prepared, ignore_errors=True)
        self.prepared.mkdir()
        (prepare or self.builder.prepare)(sample, self.prepared, total)
        write_json(self.prepared / PREPARED_DONE, {"documents": len(sample), "total_documents": total})

    def parts(self) -> list[Path]:
        found = sorted(p for p in (self.folder / "parts").iterdir() if (p / PART_FILE).is_file())
        if [p.name for p in found] != [f"{i:05d}" for i in range(len(found))]:
            raise InputError(f"{self.folder}: parts {[p.name for p in found]} are not consecutive")
        return found

    def finish(self, overwrite: bool) -> Path:
        parts = self.parts()
        if not parts:
            raise InputError(f"{self.output}: the corpus is empty; nothing to index")
        check_unique_docids(parts)
        output = self.builder.finalise(parts, self.output, self.prepared, overwrite)
        shutil.rmtree(self.folder, ignore_errors=True)
        return output


def run_part(builder: IndexBuilder, documents: list[Document], part: Path, prepared: Path) -> dict:
    """Write one part under a temporary name, then part.json, then rename: a part is complete or absent."""
    tmp = part.with_name(part.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    started = time.time()
    for docid, _ in documents:
        check_id(docid, "corpus")
    try:
        counts = builder.write_part(documents, tmp, prepared)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if not (tmp / "docids.txt").is_file():  # a builder that skips documents writes the ones it kept
        (tmp / "docids.txt").write_text("".join(f"{d}\n" for d, _ in documents), encoding="utf-8")
    info = {"documents": len(documents), **counts, "seconds": round(time.time() - started, 2)}
    write_json(tmp / PART_FILE, info)
    shutil.rmtree(part, ignore_errors=True)
    os.replace(tmp, part)
    return info


def part_docids(part: Path) -> list[str]:
    return (part / "docids.txt").read_text(encoding="utf-8").splitlines()


def check_unique_docids(parts: list[Path]) -> None:
    """A docid twice in the stream is an error naming it (64-bit hashes of every docid: 8 bytes per document)."""
    hashes = np.concatenate([np.array([_hash(d) for d in part_docids(p)], dtype=np.uint64) for p in parts])
    order = np.argsort(hashes, kind="stable")
    repeated = np.flatnonzero(hashes[order][1:] == hashes[order][:-1])
    if len(repeated):
        position = int(order[repeated[0] + 1])
        for part in parts:
            docids = part_docids(part)
            if position < len(docids):
                raise InputError(f"duplicate document id {docids[position]!r} in the corpus")
            position -= len(docids)


def _hash(docid: str) -> int:
    return int.from_bytes(hashlib.blake2b(docid.encode("utf-8"), digest_size=8).digest(), "little")


def build(builder: IndexBuilder, documents: Iterable[Document], output: str | os.PathLike,
          chunk_docs: int = DEFAULT_CHUNK_DOCS, total: int | None = None, overwrite: bool = False,
          resume: bool = True, progress: bool = True) -> Path:
    """Build `output` in this process (see the module docstring). `total`: the number of documents when known
    (a progress bar with time left, and the first pass's corpus-size rules); `resume`: continue an interrupted
    build of the same settings found in OUTPUT.building (else start over)."""
    if chunk_docs < 1:
        raise ValueError(f"chunk_docs must be >= 1, got {chunk_docs}")
    check_output(output, overwrite, builder.owns)  # before any work
    state = BuildState(builder, Path(output), chunk_docs, resume)
    try:
        stream = iter(documents)
        head = list(islice(stream, max(builder.sample_docs, 0)))
        state.run_prepare(head, total)
        with tqdm(total=total, desc=f"{builder.kind} index", unit="doc", disable=not progress, smoothing=0.05) as bar:
            for number, chunk in enumerate(chunks(_chain(head, stream), chunk_docs)):
                if not state.complete(number):
                    run_part(builder, chunk, state.part(number), state.prepared)
                bar.update(len(chunk))
        return state.finish(overwrite)
    except BaseException:
        if not resume:  # nothing will resume it: leave nothing behind
            shutil.rmtree(state.folder, ignore_errors=True)
        raise


def _chain(head: list[Document], rest: Iterator[Document]) -> Iterator[Document]:
    yield from head
    yield from rest


class _PartWriter:
    """What a Ray actor holds: one builder (the model loaded once), writing the chunks it is given."""

    def __init__(self, builder_class: type[IndexBuilder], model: str, settings: object, runtime: dict):
        self.builder = builder_class(model, settings, runtime)

    def prepare(self, sample: list[Document], prepared: str, total: int | None) -> bool:
        self.builder.prepare(sample, Path(prepared), total)
        return True

    def write(self, documents: list[Document], part: str, prepared: str) -> dict:
        return run_part(self.builder, documents, Path(part), Path(prepared))


def build_on_ray(builder: IndexBuilder, documents: Iterable[Document], output: str | os.PathLike,
                 workers: int = 2, ray_address: str | None = None, chunk_docs: int = DEFAULT_CHUNK_DOCS,
                 total: int | None = None, overwrite: bool = False, resume: bool = True,
                 progress: bool = True) -> Path:
    """`build` with the parts written by `workers` Ray actors (one model load each, one GPU each where the cluster
    has one per worker). ray_address: None starts a local Ray (or joins this process's); "auto" or
    "ray://host:port" joins a cluster, whose nodes must all see the output's folder (a shared file system).
    The driver reads the stream and finalises; it holds no model output. Same index as `build` (tested)."""
    import ray

    from java_bridge.signals import jvm_signal_handlers_kept

    if chunk_docs < 1:
        raise ValueError(f"chunk_docs must be >= 1, got {chunk_docs}")
    check_output(output, overwrite, builder.owns)
    state = BuildState(builder, Path(output), chunk_docs, resume)
    if not ray.is_initialized():  # None: a Ray of our own, never a cluster that happens to run on this machine
        with jvm_signal_handlers_kept():  # a JVM already running in this process keeps working after Ray's start
            ray.init(address=ray_address or "local", include_dashboard=False, log_to_driver=False,
                     **({} if ray_address else {"num_cpus": workers}))
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= workers else 0
    runtime = {**builder.runtime, **({"device": "cuda"} if gpus else {})}
    actor = ray.remote(num_cpus=1, num_gpus=gpus)(_PartWriter)
    actors = [actor.remote(type(builder), builder.model, builder.settings, runtime) for _ in range(workers)]
    stream = iter(documents)
    head = list(islice(stream, max(builder.sample_docs, 0)))
    state.run_prepare(head, total, lambda sample, prepared, n: ray.get(actors[0].prepare.remote(
        sample, str(prepared), n)))
    bar = tqdm(total=total, desc=f"{builder.kind} index on {workers} Ray workers", unit="doc",
               disable=not progress, smoothing=0.05)
    in_flight: dict = {}  # object ref -> (actor, documents)
    idle = list(actors) * 2  # two chunks per actor in flight: the next one is ready when one ends
    try:
        for number, chunk in enumerate(chunks(_chain(head, stream), chunk_docs)):
            if state.complete(number):
                bar.update(len(chunk))
                continue
            if not idle:
                done, _ = ray.wait(list(in_flight), num_returns=1)
                owner, size = in_flight.pop(done[0])
                ray.get(done[0])  # a worker's error surfaces here
                idle.append(owner)
                bar.update(size)
            owner = idle.pop()
            in_flight[owner.write.remote(chunk, str(state.part(number)), str(state.prepared))] = (owner, len(chunk))
        for ref, (_, size) in in_flight.items():
            ray.get(ref)
            bar.update(size)
    finally:
        bar.close()
    for a in actors:
        ray.kill(a)
    return state.finish(overwrite)


def corpus_size(path: str | os.PathLike) -> int:
    """Documents in a corpus file or folder (non-blank lines), counted without parsing: for progress and for
    the rules that follow the corpus size."""
    from pyserini_ext.data.readers import corpus_files, open_text

    return sum(sum(1 for line in open_text(f) if line.strip()) for f in corpus_files(path))


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_json(path: Path, value: object) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(value, indent=1))
    os.replace(tmp, path)
