"""`pyserini-ext prebuilt pack|download|list`: package indexes and fetch them like Pyserini's prebuilt ones."""
from __future__ import annotations

import json
from dataclasses import dataclass

from pyserini_ext.cli.options import Command, command_group, option
from pyserini_ext.index.prebuilt import PYSERINI_INFO


@dataclass
class PackOptions:
    index: str = option(help="index folder to pack")
    name: str = option(help="catalogue name of the index")
    output: str = option(help="folder for the .tar.gz")
    url: list[str] | None = option(None, help="where the tarball will be served (mirrors: repeat)", repeat=True)
    description: str = option("", help="one line for the catalogue")
    catalogue: str | None = option(None, help="catalogue JSON to add the record to")
    kind: str | None = option(None, choices=sorted(PYSERINI_INFO), help="which searcher opens it (default: detected)")
    model: str | None = option(None, help="model folder or bare name that built the index (recorded with its md5)")
    texts: str | None = option(None, help="Faiss indexes: the prebuilt Lucene index name holding the passages")


@dataclass
class DownloadOptions:
    name: str = option(help="catalogue name of the index", positional=True)
    catalogue: str | None = option(None, help="catalogue JSON (default: the packaged one)")
    force: bool = option(False, help="download again even if present")


@dataclass
class ListOptions:
    catalogue: str | None = option(None, help="catalogue JSON (default: the packaged one)")


def pack(options: PackOptions) -> None:
    from pyserini_ext.index.prebuilt import pack_index

    record = pack_index(options.index, options.name, options.output, options.url, options.description,
                        options.catalogue, options.kind, options.model, options.texts)
    print(json.dumps({options.name: record}, indent=1))


def download(options: DownloadOptions) -> None:
    from pyserini_ext.index.prebuilt import download_prebuilt

    print(download_prebuilt(options.name, options.catalogue, options.force))


def listing(options: ListOptions) -> None:
    from pyserini_ext.index.prebuilt import load_catalogue

    for name, record in sorted(load_catalogue(options.catalogue).items()):
        print(f"{name}\t{record.get('size_bytes', '?')} bytes\t{record.get('description', '')}")


main = command_group("pyserini-ext prebuilt", __doc__, {
    "pack": Command("tar.gz an index folder and write its catalogue record", PackOptions, pack),
    "download": Command("fetch, check and unpack a prebuilt index; prints its path", DownloadOptions, download),
    "list": Command("the catalogue's index names", ListOptions, listing),
})
