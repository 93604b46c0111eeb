"""`pyserini-ext prebuilt pack|download|list`: package indexes and fetch them like Pyserini's prebuilt ones."""
from __future__ import annotations

import argparse
import json

from pyserini_ext.index.prebuilt import PYSERINI_INFO, download_prebuilt, load_catalogue, pack_index


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="pyserini-ext prebuilt")
    commands = parser.add_subparsers(dest="command", required=True)
    pack = commands.add_parser("pack", help="tar.gz an index folder and write its catalogue record")
    pack.add_argument("--index", required=True)
    pack.add_argument("--name", required=True)
    pack.add_argument("--output", required=True, help="folder for the .tar.gz")
    pack.add_argument("--url", action="append", help="where the tarball will be served (mirrors: repeat)")
    pack.add_argument("--description", default="")
    pack.add_argument("--catalogue", help="catalogue JSON to add the record to")
    pack.add_argument("--kind", choices=sorted(PYSERINI_INFO), help="which searcher opens it (default: detected)")
    pack.add_argument("--model", help="model folder or bare name that built the index (recorded with its md5)")
    pack.add_argument("--texts", help="Faiss indexes: the prebuilt Lucene index name holding the passages")
    download = commands.add_parser("download", help="fetch, check and unpack a prebuilt index; prints its path")
    download.add_argument("name")
    download.add_argument("--catalogue")
    download.add_argument("--force", action="store_true")
    listing = commands.add_parser("list", help="the catalogue's index names")
    listing.add_argument("--catalogue")
    args = parser.parse_args(argv)

    if args.command == "pack":
        record = pack_index(args.index, args.name, args.output, args.url, args.description, args.catalogue,
                            args.kind, args.model, args.texts)
        print(json.dumps({args.name: record}, indent=1))
    elif args.command == "download":
        print(download_prebuilt(args.name, args.catalogue, args.force))
    else:
        for name, record in sorted(load_catalogue(args.catalogue).items()):
            print(f"{name}\t{record.get('size_bytes', '?')} bytes\t{record.get('description', '')}")
    return 0
