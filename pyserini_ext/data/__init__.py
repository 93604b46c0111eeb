"""Every reader (corpus, topics, qrels, BEIR datasets), the one text rule, Pyserini-input writers, and
`atomic_output` for every file or folder we write."""
from pyserini_ext.data.beir import BeirDataset, DatasetError, data_home, load_dataset
from pyserini_ext.data.output import atomic_output, check_output
from pyserini_ext.data.readers import (
           check_id,
           iter_corpus,
           iter_jsonl,
           read_corpus,
           read_qrels,
           read_topics,
           read_triples,
)
from pyserini_ext.data.text import document_text, document_texts, sanitize_texts
from pyserini_ext.data.writers import write_json_collection, write_topics, write_trec_qrels

__all__ = ["BeirDataset", "DatasetError", "atomic_output", "check_id", "check_output", "data_home", "document_text",
           "document_texts", "iter_corpus", "iter_jsonl", "load_dataset", "read_corpus", "read_qrels", "read_topics",
           "read_triples", "sanitize_texts", "write_json_collection", "write_topics", "write_trec_qrels"]
