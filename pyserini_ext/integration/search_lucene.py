"""`pyserini.search.lucene._impact_searcher`: `--impact --encoder` with our models, and our prebuilt impact
indexes searched only with the model that built them.

Pyserini resolves `--impact --encoder X` by substrings of X (unicoil/splade/slim) and ignores the class maps, so
`LuceneImpactSearcher._init_query_encoder_from_str` hands a model of ours (`deepct`, a folder holding
`deepct_config.json`) to our query encoder.
"""
from __future__ import annotations

from pyserini_ext.integration import patch
from pyserini_ext.integration.encode import our_class
from pyserini_ext.integration.prebuilt import check_prebuilt_model


def install(impact_module) -> None:
    """Let `python -m pyserini.search.lucene --impact --encoder deepct` (or a DeepCT folder) use our encoder."""
    searcher = impact_module.LuceneImpactSearcher

    def make(original):
        def init_query_encoder_from_str(query_encoder):
            ours = our_class(query_encoder, "query") if isinstance(query_encoder, str) else None
            if ours is not None:
                return ours(query_encoder)
            return original(query_encoder)

        return init_query_encoder_from_str

    patch.install(searcher, "_init_query_encoder_from_str", make, descriptor=staticmethod)
    check_prebuilt_model(searcher)
