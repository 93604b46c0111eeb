"""`python -m pyserini.search.lucene --impact --encoder <DeepCT model folder>`, unchanged, uses our encoder."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from pyserini_ext.data import document_text
from pyserini_ext.evaluation import read_trec_run
from pyserini_ext.index.deepct import write_term_frequency_index
from pyserini_ext.integration.encoders import DeepCTQueryEncoder
from pyserini_ext.models.deepct import DeepCTModel
from pyserini_ext.models.deepct_terms import merge_word_weights, word_term_frequencies

MODEL = Path(__file__).resolve().parents[1] / "resources" / "models" / "deepct-splade-tiny"


def test_impact_cli_resolves_a_deepct_folder(scifact, tmp_path):
    from pyserini.search.lucene import LuceneImpactSearcher

    model = DeepCTModel.from_pretrained(MODEL)
    docids = sorted(scifact.corpus)[:80]
    weights = model.word_weights([document_text(scifact.corpus[d]) for d in docids])
    tfs = {d: word_term_frequencies(merge_word_weights(w)) for d, w in zip(docids, weights)}
    index = tmp_path / "index"
    write_term_frequency_index(((d, t, "") for d, t in tfs.items()), index)
    topics = {"q1": "insulin resistance in obese mice", "q2": "stem cell differentiation"}
    (tmp_path / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in topics.items()))
    run = tmp_path / "run.txt"
    proc = subprocess.run([sys.executable, "-m", "pyserini.search.lucene", "--index", str(index), "--topics",
                    str(tmp_path / "topics.tsv"), "--output", str(run), "--impact", "--encoder", str(MODEL),
                    "--hits", "10"], check=True, capture_output=True, text=True)
    assert run.is_file(), proc.stdout[-2000:] + proc.stderr[-3000:]
    cli = read_trec_run(run)
    api = LuceneImpactSearcher(str(index), DeepCTQueryEncoder(MODEL))
    for qid, text in topics.items():
        expected = [(h.docid, round(h.score, 4)) for h in api.search(text, 10)]
        assert expected and [(d, round(s, 4)) for d, s in cli[qid]] == expected
