"""The files of an AligneR index folder (and of a build's parts): one reader and writer that names what is wrong."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np
from numpy.lib import format as npy_format

from pyserini_ext.errors import IndexFolderError

METADATA_FILE = "metadata.json"
INDEX_FORMAT = "pyserini-ext-aligner-index/2"
# format 1 (one segment of centroid lists, no segments.npy) still opens: the prebuilt catalogue's indexes
READABLE_FORMATS = ("pyserini-ext-aligner-index/1", INDEX_FORMAT)


def is_index(folder: Path) -> bool:
    """Whether `folder` is a finished AligneR index (only such a folder is replaced on --overwrite)."""
    return (Path(folder) / METADATA_FILE).is_file()


class AlignerIndexError(IndexFolderError):
    """An AligneR index folder is missing, incomplete, corrupt, or does not fit the model used with it."""


@dataclass
class IndexFiles:
    """Reads and writes the files of one index folder; a read names the file and what is wrong with it."""
    folder: Path
    tokens: int = 0

    def save(self, name: str, array: np.ndarray) -> None:
        np.save(self.folder / name, array)

    def save_faiss(self, name: str, index: faiss.Index) -> None:
        faiss.write_index(index, str(self.folder / name))

    def exists(self, name: str) -> bool:
        return (self.folder / name).is_file()

    def array(self, name: str, rows: int | None = None) -> np.ndarray:
        """Memory-mapped `name`, checked to hold `rows` rows (default: the index's tokens; -1: any)."""
        path = self.folder / name
        if not path.is_file():
            raise AlignerIndexError(f"{self.folder}: missing {name}")
        try:
            array = np.load(path, mmap_mode="r")
        except (ValueError, OSError, EOFError) as e:
            raise AlignerIndexError(f"{path}: corrupt ({e})") from None
        rows = self.tokens if rows is None else rows
        if rows >= 0 and array.shape[0] != rows:
            raise AlignerIndexError(f"{path}: {array.shape[0]} rows, metadata says {rows}")
        return array

    def faiss_index(self, name: str) -> faiss.Index:
        path = self.folder / name
        if not path.is_file():
            raise AlignerIndexError(f"{self.folder}: missing {name}")
        try:
            return faiss.read_index(str(path))
        except RuntimeError as e:
            raise AlignerIndexError(f"{path}: corrupt Faiss index ({str(e).splitlines()[0]})") from None

    def concatenate(self, name: str, parts: list[Path]) -> int:
        """Write the row-wise concatenation of the parts' `name` here, one part in memory at a time; the rows."""
        return concatenate_npy([p / name for p in parts], self.folder / name)


def concatenate_npy(sources: list[Path], target: Path) -> int:
    """Write the row-wise concatenation of .npy files, one source in memory at a time; returns the rows."""
    shapes = [np.load(s, mmap_mode="r") for s in sources]  # headers only: no page of the data is touched
    rows = sum(a.shape[0] for a in shapes)
    header = {"descr": npy_format.dtype_to_descr(shapes[0].dtype), "fortran_order": False,
              "shape": (rows, *shapes[0].shape[1:])}
    del shapes
    with open(target, "wb") as f:
        npy_format.write_array_header_2_0(f, header)
        for source in sources:  # read, not memory-mapped: mapped pages would stay in this process's RSS
            f.write(np.ascontiguousarray(np.load(source)).tobytes())
    return rows
