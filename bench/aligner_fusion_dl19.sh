#!/usr/bin/env bash
set -e
# AligneR + BM25 on the DL19 subset with the unchanged Pyserini commands (index from scripts/eval_aligner.py).
# Prints nDCG@10 and R@100 (-l 2) of BM25, AligneR and their RRF fusion; also runs few-shot adaptation.
cd "$(dirname "$0")/.."
W=${1:-runs/aligner-fusion}
.venv/bin/pyserini-ext aligner adapt --index runs/aligner-eval/dl19/index-exact-1 --dataset msmarco-dl19-subset --split test --relevance-level 2 --hits 100 > $W/adapt-dl19.json
.venv/bin/python -c "
from pyserini_ext.data import load_dataset, write_json_collection, write_topics
ds = load_dataset('msmarco-dl19-subset')
write_json_collection(ds.corpus, '$W/collection'); write_topics(ds.split_queries('test'), '$W/topics.tsv')"
.venv/bin/python -m pyserini.index.lucene --collection JsonCollection --input $W/collection --index $W/lucene --generator DefaultLuceneDocumentGenerator --threads 1 > $W/lucene.log 2>&1
.venv/bin/python -m pyserini.search.lucene --index $W/lucene --topics $W/topics.tsv --output $W/run.bm25.txt --bm25 --hits 100 > $W/bm25.log 2>&1
.venv/bin/pyserini-ext aligner search --index runs/aligner-eval/dl19/index-exact-1 --topics $W/topics.tsv --output $W/run.aligner.txt --hits 100
.venv/bin/python -m pyserini.fusion --runs $W/run.bm25.txt $W/run.aligner.txt --output $W/run.rrf.txt --method rrf --k 100 > $W/fusion.log 2>&1
for r in bm25 aligner rrf; do echo "== $r"; .venv/bin/python -m pyserini.eval.trec_eval -c -m ndcg_cut.10 runs/aligner-eval/dl19/qrels.txt $W/run.$r.txt | grep ndcg; .venv/bin/python -m pyserini.eval.trec_eval -c -l 2 -m recall.100 runs/aligner-eval/dl19/qrels.txt $W/run.$r.txt | grep recall; done
