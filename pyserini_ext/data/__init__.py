"""BEIR-layout datasets (corpus, queries, qrels) and writers for Pyserini's input formats."""
from pyserini_ext.data.beir import BeirDataset, DatasetError, data_home, load_dataset
from pyserini_ext.data.writers import write_json_collection, write_topics, write_trec_qrels

__all__ = ["BeirDataset", "DatasetError", "data_home", "load_dataset", "write_json_collection", "write_topics",
           "write_trec_qrels"]
