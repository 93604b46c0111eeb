"""Prebuilt indexes, packed and fetched the way Pyserini does it, and known to Pyserini's own loaders by name.

A catalogue is a JSON object `{name: record}`; a record holds `urls` (mirrors, tried in order), `filename`,
`md5` and `size_bytes` of the `.tar.gz`, `kind` (which of Pyserini's searchers opens it: `lucene`, `impact`,
`deepct` (both), `faiss`, or `aligner` for our own searcher), `stats` (Lucene counts, checked by Pyserini's
`LuceneIndexReader.validate`), `model` (name, family and md5 of the weights that built it) and what the index
folder's own metadata says.

The catalogue shipped in the package (`resources/prebuilt_indexes.json`) and a user's own (`$PYSERINI_EXT_CATALOGUE`)
are both registered into Pyserini's `TF_INDEX_INFO` / `IMPACT_INDEX_INFO` / `FAISS_INDEX_INFO` when
`pyserini.util` is imported, and `pyserini.util.download_prebuilt_index` fetches their names with
`download_prebuilt` (the patching: pyserini_ext/integration/prebuilt.py). `$PYSERINI_EXT_MIRROR` (base URLs,
space-separated) is tried before a record's URLs, for our names and for Pyserini's own indexes and encoded queries.

`download_prebuilt` unpacks to `<cache>/indexes/<stem>.<md5>` under `$PYSERINI_CACHE` (default
`~/.cache/pyserini`), `<stem>` being the file name without `.tar.gz`, exactly where Pyserini puts it, but checks
size and md5 before unpacking, refuses archive members that would land outside the target, and renames into
place only when everything is there: an interrupted or corrupt download never leaves a folder that looks like
an index. Searching one of our indexes with another model than the one that built it is an error
(`check_model`).
"""
from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import warnings
from pathlib import Path

from tqdm import tqdm  # not tqdm.auto: that imports asyncio, at every Pyserini start

from pyserini_ext import registry
from pyserini_ext.data import atomic_output
from pyserini_ext.models.folder import model_family, resolve_model

CATALOGUE_ENV = "PYSERINI_EXT_CATALOGUE"
MIRROR_ENV = "PYSERINI_EXT_MIRROR"
CATALOGUE_FILE = "prebuilt_indexes.json"
METADATA_FILES = ("metadata.json", "index_metadata.json", "deepct_index.json", "pyserini_ext_index.json")
WEIGHT_SUFFIXES = (".safetensors", ".pt", ".bin", ".onnx")
# kind -> the names of Pyserini's dicts (in pyserini.prebuilt_index_info) that list an index of that kind
PYSERINI_INFO = {"lucene": ("TF_INDEX_INFO",), "impact": ("IMPACT_INDEX_INFO",),
                 "deepct": ("TF_INDEX_INFO", "IMPACT_INDEX_INFO"), "faiss": ("FAISS_INDEX_INFO",), "aligner": ()}


class PrebuiltIndexError(RuntimeError):
    pass


def default_catalogue() -> Path:
    return registry.resources_dir() / CATALOGUE_FILE


def cache_home() -> Path:
    return Path(os.environ.get("PYSERINI_CACHE") or Path.home() / ".cache" / "pyserini")


def md5sum(path: str | os.PathLike, block_size: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(block_size), b""):
            digest.update(block)
    return digest.hexdigest()


def _read_catalogue(path: Path) -> dict[str, dict]:
    try:
        catalogue = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PrebuiltIndexError(f"{path}: not a valid catalogue ({e})") from None
    if not isinstance(catalogue, dict):
        raise PrebuiltIndexError(f"{path}: a catalogue is a JSON object of name -> record")
    return catalogue


def load_catalogue(path: str | os.PathLike | None = None) -> dict[str, dict]:
    """The catalogue at `path`; by default the shipped one updated with `$PYSERINI_EXT_CATALOGUE`'s records."""
    if path is not None:
        path = Path(path)
        return _read_catalogue(path) if path.is_file() else {}
    entries = _read_catalogue(default_catalogue()) if default_catalogue().is_file() else {}
    user = os.environ.get(CATALOGUE_ENV)
    if user:
        if not Path(user).is_file():
            raise PrebuiltIndexError(f"${CATALOGUE_ENV}={user}: no such file")
        entries.update(_read_catalogue(Path(user)))
    return entries


def mirror_urls(filename: str) -> list[str]:
    """`$PYSERINI_EXT_MIRROR` base URLs joined with `filename`, in the order given."""
    return [f"{base.rstrip('/')}/{filename}" for base in os.environ.get(MIRROR_ENV, "").split()]


def model_fingerprint(model: str | os.PathLike) -> dict:
    """Which model (name, family) and which version (md5 of its weight files) a model folder or bare name is."""
    folder = Path(resolve_model(model))
    if not folder.is_dir():
        raise PrebuiltIndexError(f"{model}: not a model folder")
    digest = hashlib.md5()
    weights = sorted(p for p in folder.iterdir() if p.suffix in WEIGHT_SUFFIXES and p.is_file())
    if not weights:
        raise PrebuiltIndexError(f"{folder}: no weight files ({', '.join(WEIGHT_SUFFIXES)})")
    for path in weights:
        digest.update(path.name.encode())
        digest.update(md5sum(path).encode())
    return {"name": folder.name, "family": model_family(folder), "md5": digest.hexdigest()}


def _metadata_file(index_dir: Path) -> Path | None:
    return next((index_dir / n for n in METADATA_FILES if (index_dir / n).is_file()), None)


def _index_metadata(index_dir: Path) -> dict:
    file = _metadata_file(index_dir)
    return json.loads(file.read_text()) if file else {}


def portable_metadata(metadata: dict) -> dict:
    """The metadata as a packed index carries it: no folder of the machine that built it. An absolute model path
    becomes `resources/models/<name>` for a shipped model and the folder's name otherwise (the catalogue's `model`
    record, name and weights' md5, is what search checks)."""
    model = metadata.get("model")
    if not isinstance(model, dict) or not isinstance(model.get("path"), str) or not Path(model["path"]).is_absolute():
        return metadata
    path = Path(model["path"])
    resources = registry.resources_dir().resolve()
    portable = (f"{resources.name}/{path.resolve().relative_to(resources).as_posix()}"
                if path.resolve().is_relative_to(resources) else path.name)
    return {**metadata, "model": {**model, "path": portable}}


def detect_kind(index_dir: Path) -> str:
    if (index_dir / "index").is_file() and (index_dir / "docid").is_file():
        return "faiss"
    metadata = _index_metadata(index_dir)
    if metadata.get("index") == "deepct":
        return "deepct"
    if (index_dir / "metadata.json").is_file() and "aligner" in json.dumps(metadata).lower():
        return "aligner"
    if any(p.name.startswith("segments_") for p in index_dir.iterdir()):
        return "lucene"
    raise PrebuiltIndexError(f"{index_dir}: cannot tell what kind of index this is; pass kind (--kind)")


def _lucene_stats(index_dir: Path) -> dict:
    from pyserini.index.lucene import LuceneIndexReader

    stats = LuceneIndexReader(str(index_dir)).stats()
    return {k: int(stats[k]) for k in ("documents", "unique_terms", "total_terms")}


def _normalised(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.mtime, member.uid, member.gid, member.uname, member.gname = 0, 0, 0, "", ""
    return member


def pack_index(index_dir: str | os.PathLike, name: str, out_dir: str | os.PathLike, urls: list[str] | None = None,
               description: str = "", catalogue: str | os.PathLike | None = None, kind: str | None = None,
               model: str | os.PathLike | None = None, texts: str | None = None) -> dict:
    """`<out_dir>/<name>.tar.gz` holding `<name>/...`, and its catalogue record (added to `catalogue` if given).

    `model` (a folder or bare name) is recorded with the md5 of its weights; searching the index with another
    model is then refused. `texts` names the prebuilt Lucene index that holds a Faiss index's passages
    (Pyserini's `FaissSearcher.doc` reads them there).
    """
    index_dir = Path(index_dir)
    if not index_dir.is_dir() or not any(index_dir.iterdir()):
        raise PrebuiltIndexError(f"{index_dir}: not an index folder (missing or empty)")
    kind = kind or detect_kind(index_dir)
    if kind not in PYSERINI_INFO:
        raise PrebuiltIndexError(f"unknown index kind {kind!r}; known: {', '.join(PYSERINI_INFO)}")
    tarball = Path(out_dir) / f"{name}.tar.gz"
    metadata_file, stored = _metadata_file(index_dir), _index_metadata(index_dir)
    metadata = portable_metadata(stored)
    rewritten = metadata != stored  # only a metadata file's contents can differ from their portable form

    def member(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if rewritten and info.name == f"{name}/{metadata_file.name}":
            return None  # added below, portable
        return _normalised(info)

    # no timestamps or owners in the archive: its md5 depends on the index files alone (a rebuilt index still
    # differs: Lucene writes random segment ids, and encodings vary in their last float bits between runs)
    with atomic_output(tarball, overwrite=True) as partial, open(partial, "wb") as raw, \
            gzip.GzipFile(filename="", mode="wb", fileobj=raw, mtime=0) as zipped, \
            tarfile.open(fileobj=zipped, mode="w") as tar:
        tar.add(index_dir, arcname=name, filter=member)
        if rewritten:
            data = (json.dumps(metadata, indent=1) + "\n").encode()
            info = _normalised(tarfile.TarInfo(f"{name}/{metadata_file.name}"))
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    record = {"description": description, "filename": tarball.name, "kind": kind,
              "urls": urls if urls is not None else [tarball.resolve().as_uri()], "md5": md5sum(tarball),
              "size_bytes": tarball.stat().st_size,
              "files": sum(1 for p in index_dir.rglob("*") if p.is_file()),
              "metadata": metadata}
    if kind in ("lucene", "impact", "deepct"):
        record["stats"] = _lucene_stats(index_dir)
    if model is not None:
        record["model"] = model_fingerprint(model)
    if texts is not None:
        record["texts"] = texts
    if catalogue is not None:
        path = Path(catalogue)
        entries = load_catalogue(path)
        entries[name] = record
        with atomic_output(path, overwrite=True) as tmp:
            tmp.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    return record


def _fetch(url: str, destination: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as response, open(destination, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        received = 0
        with tqdm(total=total, unit="B", unit_scale=True, desc=destination.name, file=sys.stderr) as bar:
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                received += len(block)
                bar.update(len(block))
    if total is not None and received != total:
        raise http.client.IncompleteRead(b"", total - received)


def _safe_extract(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            resolved = (target / member.name).resolve()
            if not resolved.is_relative_to(target.resolve()) or member.issym() or member.islnk():
                raise PrebuiltIndexError(f"{tarball}: unsafe archive member {member.name!r}")
        tar.extractall(target)


def fetch_and_unpack(name: str, urls: list[str], md5: str, size: int | None = None,
                     filename: str | None = None, subdir: str = "indexes", force: bool = False) -> Path:
    """`<cache>/<subdir>/<stem>.<md5>`: the archive from the first of `urls` whose bytes match, unpacked."""
    filename = filename or f"{name}.tar.gz"
    stem = filename.removesuffix(".tar.gz")
    root = cache_home() / subdir
    target = root / f"{stem}.{md5}"
    if target.is_dir() and not force:
        return target
    root.mkdir(parents=True, exist_ok=True)
    errors = []
    with tempfile.TemporaryDirectory(dir=root, prefix=f".{stem}.") as tmp:
        tarball = Path(tmp) / filename
        for url in urls:
            try:
                _fetch(url, tarball)
            except (OSError, http.client.HTTPException) as e:  # refused, 404, or cut off mid-way
                errors.append(f"{url}: {type(e).__name__}: {e}")
                continue
            got_size, got_md5 = tarball.stat().st_size, md5sum(tarball)
            if size not in (None, -1, got_size) or got_md5 != md5:
                errors.append(f"{url}: got {got_size} bytes with md5 {got_md5}, expected {size} bytes with md5 {md5}")
                continue
            unpacked = Path(tmp) / "unpacked"
            _safe_extract(tarball, unpacked)
            folders = [p for p in unpacked.iterdir() if p.is_dir()]
            if len(folders) != 1:
                raise PrebuiltIndexError(f"{url}: expected one top folder in the archive, got {len(folders)}")
            if target.exists():
                shutil.rmtree(target)
            os.replace(folders[0], target)
            return target
    what = "index" if subdir == "indexes" else subdir
    if not errors:
        errors = [f"no URL known: set ${MIRROR_ENV} to where {filename} is served (`make prebuilt` writes it to "
                  "dist/prebuilt; a file:// URL works)"]
    raise PrebuiltIndexError(f"could not fetch prebuilt {what} {name!r}:\n  " + "\n  ".join(errors))


def download_prebuilt(name: str, catalogue: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Path of the unpacked prebuilt index `name`, downloading it first when needed."""
    entries = load_catalogue(catalogue)
    if name not in entries:
        raise PrebuiltIndexError(f"unknown prebuilt index {name!r}; known: {', '.join(sorted(entries)) or 'none'}")
    record = entries[name]
    filename = record.get("filename") or f"{name}.tar.gz"
    return fetch_and_unpack(name, mirror_urls(filename) + list(record["urls"]), record["md5"],
                            record.get("size_bytes"), filename, force=force)


def check_model(name: str, model: str | os.PathLike | None, catalogue: str | os.PathLike | None = None) -> None:
    """Refuse to search our prebuilt index `name` with a model other than the one recorded as building it.

    `model` None means the caller could not tell which model it holds: a warning, not an error.
    """
    built_by = load_catalogue(catalogue).get(name, {}).get("model")
    if not built_by:
        return
    if model is None:
        warnings.warn(f"{name} was built by {built_by['name']} (md5 {built_by['md5']}); could not check that the "
                      "query encoder holds that model", stacklevel=3)
        return
    folder = Path(resolve_model(model))
    ours = folder.is_dir() and model_family(folder) is not None  # a hub name is not the recorded folder
    used = model_fingerprint(folder) if ours else {"name": "not one of our models", "md5": "-"}
    if used["md5"] != built_by["md5"]:
        raise PrebuiltIndexError(f"prebuilt index {name} was built by {built_by['name']} (weights md5 "
                                 f"{built_by['md5']}), but is searched with {model} ({used['name']}, weights md5 "
                                 f"{used['md5']}); use the model that built it")


def shipped_model(name: str, catalogue: str | os.PathLike | None = None) -> Path | None:
    """The shipped model folder that built prebuilt index `name`, if this installation has it."""
    built_by = load_catalogue(catalogue).get(name, {}).get("model")
    folder = registry.resources_dir() / "models" / built_by["name"] if built_by else None
    return folder if folder is not None and folder.is_dir() else None
