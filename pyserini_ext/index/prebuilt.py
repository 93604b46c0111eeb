"""Prebuilt indexes, packed and fetched the way Pyserini does it.

A catalogue is a JSON object `{name: record}`; a record holds `urls` (mirrors, tried in order), `md5` and
`size_bytes` of the `.tar.gz`, a `description`, and what the index folder's own metadata says (model, counts).
`download_prebuilt` unpacks to `<cache>/indexes/<name>.<md5>` under `$PYSERINI_CACHE` (default
`~/.cache/pyserini`), as Pyserini does, but checks size and md5 before unpacking, refuses archive members that
would land outside the target, and renames into place only when everything is there: an interrupted or
corrupt download never leaves a folder that looks like an index.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
from pathlib import Path

from tqdm.auto import tqdm

from pyserini_ext.data import atomic_output

CATALOGUE_ENV = "PYSERINI_EXT_CATALOGUE"
DEFAULT_CATALOGUE = Path(__file__).resolve().parents[2] / "resources" / "prebuilt_indexes.json"
METADATA_FILES = ("metadata.json", "index_metadata.json", "pyserini_ext_index.json")


class PrebuiltIndexError(RuntimeError):
    pass


def cache_home() -> Path:
    return Path(os.environ.get("PYSERINI_CACHE") or Path.home() / ".cache" / "pyserini")


def md5sum(path: str | os.PathLike, block_size: int = 1 << 20) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(block_size), b""):
            digest.update(block)
    return digest.hexdigest()


def load_catalogue(path: str | os.PathLike | None = None) -> dict[str, dict]:
    path = Path(path or os.environ.get(CATALOGUE_ENV) or DEFAULT_CATALOGUE)
    if not path.is_file():
        return {}
    try:
        catalogue = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise PrebuiltIndexError(f"{path}: not a valid catalogue ({e})") from None
    if not isinstance(catalogue, dict):
        raise PrebuiltIndexError(f"{path}: a catalogue is a JSON object of name -> record")
    return catalogue


def _index_metadata(index_dir: Path) -> dict:
    for name in METADATA_FILES:
        if (index_dir / name).is_file():
            return json.loads((index_dir / name).read_text())
    return {}


def pack_index(index_dir: str | os.PathLike, name: str, out_dir: str | os.PathLike, urls: list[str] | None = None,
               description: str = "", catalogue: str | os.PathLike | None = None) -> dict:
    """`<out_dir>/<name>.tar.gz` holding `<name>/...`, and its catalogue record (added to `catalogue` if given)."""
    index_dir = Path(index_dir)
    if not index_dir.is_dir() or not any(index_dir.iterdir()):
        raise PrebuiltIndexError(f"{index_dir}: not an index folder (missing or empty)")
    tarball = Path(out_dir) / f"{name}.tar.gz"
    with atomic_output(tarball, overwrite=True) as partial, tarfile.open(partial, "w:gz") as tar:
        tar.add(index_dir, arcname=name)
    record = {"description": description, "filename": tarball.name,
              "urls": urls or [tarball.resolve().as_uri()], "md5": md5sum(tarball),
              "size_bytes": tarball.stat().st_size,
              "files": sum(1 for p in index_dir.rglob("*") if p.is_file()),
              "metadata": _index_metadata(index_dir)}
    if catalogue is not None:
        path = Path(catalogue)
        entries = load_catalogue(path) if path.is_file() else {}
        entries[name] = record
        with atomic_output(path, overwrite=True) as tmp:
            tmp.write_text(json.dumps(entries, indent=1, sort_keys=True) + "\n")
    return record


def _fetch(url: str, destination: Path) -> None:
    with urllib.request.urlopen(url, timeout=60) as response, open(destination, "wb") as out:
        total = int(response.headers.get("Content-Length") or 0) or None
        with tqdm(total=total, unit="B", unit_scale=True, desc=destination.name, file=sys.stderr) as bar:
            for block in iter(lambda: response.read(1 << 20), b""):
                out.write(block)
                bar.update(len(block))


def _safe_extract(tarball: Path, target: Path) -> None:
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            resolved = (target / member.name).resolve()
            if not resolved.is_relative_to(target.resolve()) or member.issym() or member.islnk():
                raise PrebuiltIndexError(f"{tarball}: unsafe archive member {member.name!r}")
        tar.extractall(target)


def download_prebuilt(name: str, catalogue: str | os.PathLike | None = None, force: bool = False) -> Path:
    """Path of the unpacked prebuilt index `name`, downloading it first when needed."""
    entries = load_catalogue(catalogue)
    if name not in entries:
        raise PrebuiltIndexError(f"unknown prebuilt index {name!r}; known: {', '.join(sorted(entries)) or 'none'}")
    record = entries[name]
    index_root = cache_home() / "indexes"
    target = index_root / f"{name}.{record['md5']}"
    if target.is_dir() and not force:
        return target
    index_root.mkdir(parents=True, exist_ok=True)
    errors = []
    with tempfile.TemporaryDirectory(dir=index_root, prefix=f".{name}.") as tmp:
        tarball = Path(tmp) / f"{name}.tar.gz"
        for url in record["urls"]:
            try:
                _fetch(url, tarball)
            except OSError as e:
                errors.append(f"{url}: {e}")
                continue
            size, md5 = tarball.stat().st_size, md5sum(tarball)
            if record.get("size_bytes") not in (None, size) or md5 != record["md5"]:
                errors.append(f"{url}: got {size} bytes with md5 {md5}, expected {record.get('size_bytes')} "
                              f"bytes with md5 {record['md5']}")
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
    raise PrebuiltIndexError(f"could not fetch prebuilt index {name!r}:\n  " + "\n  ".join(errors))
