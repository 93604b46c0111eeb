"""`pyserini-ext data export`: a BEIR dataset as Pyserini inputs (JsonCollection, TSV topics, TREC qrels)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pyserini_ext.cli.options import Command, command_group, option


@dataclass
class ExportOptions:
    dataset: str = option(help="name in $PYSERINI_EXT_DATA, or a BEIR folder", positional=True)
    output: str = option(help="folder for collection/docs.jsonl, topics.<split>.tsv, qrels.<split>.txt")
    split: list[str] | None = option(None, help="qrels split(s) to export (repeat; default: all)", repeat=True)
    no_download: bool = option(False, help="fail rather than download a missing dataset")
    overwrite: bool = option(False, help="write into an existing export folder")


def export(options: ExportOptions) -> None:
    from pyserini_ext.data import check_output, load_dataset, write_json_collection, write_topics, write_trec_qrels

    out = Path(options.output)
    check_output(out, options.overwrite, owned=lambda folder: (folder / "collection").is_dir())
    dataset = load_dataset(options.dataset, download=not options.no_download)
    # read (and check) everything before writing anything: a bad line leaves no partial export
    corpus = dataset.corpus
    splits = {split: (dataset.split_queries(split), dataset.qrels(split))
              for split in options.split or dataset.splits()}
    print(write_json_collection(corpus, out / "collection"))
    for split, (queries, qrels) in splits.items():
        print(write_topics(queries, out / f"topics.{split}.tsv"))
        print(write_trec_qrels(qrels, out / f"qrels.{split}.txt"))


main = command_group("pyserini-ext data", __doc__, {
    "export": Command("write collection/docs.jsonl, topics.<split>.tsv, qrels.<split>.txt", ExportOptions, export),
})
