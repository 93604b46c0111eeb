"""Every change pyserini-ext makes to Pyserini, in one package: one module per patched Pyserini module, each with
`install(module)`, all through `patch.py` (which records each change and never makes one twice).

Pyserini 1.6 has no plugin mechanism, so our names reach its unchanged commands by post-import hooks: right after
a Pyserini module below has executed, our module's `install` patches it. Pyserini's files are never edited.

    pyserini                                  shell.py          this interpreter first on PATH as `python`
    pyserini.setup                            jvm.py            JVM options the selected Java runtime honours
    pyserini.encode                           encode.py         our encoder classes in its class maps
                                              arguments.py      our names in `--encoder-class` choices (argparse)
    pyserini.util                             prebuilt.py       our catalogues in its prebuilt-index dicts; downloads
    pyserini.search.lucene._impact_searcher   search_lucene.py  `--impact --encoder` with our models; model check
    pyserini.search.faiss._searcher           search_faiss.py   model check of `from_prebuilt_index`; our
                                                                ivfpq-refine indexes read memory-mapped
    pyserini.server                           server.py         its controller's UniIR import and default index
                                                                deferred to their first use
    pyserini.server.models                    server_models.py  index type `aligner` (our AligneR records)
    pyserini.server.search_controller         server_controller.py  our indexes opened by name with their models;
                                                                checked input, one-line errors
    pyserini.server.rest.routes.indexes       server_routes.py  4xx / 500 answers with a one-line detail
    pyserini.server.rest.app                  server_rest.py    `--host` (default 127.0.0.1)

Kept import-free: `_startup` imports this package at every interpreter start. The modules are named as strings
here, imported only when their Pyserini module is.
"""

# Pyserini module -> our module whose `install(module)` runs right after it has executed
PATCHED_MODULES = {
    "pyserini": "pyserini_ext.integration.shell",
    "pyserini.setup": "pyserini_ext.integration.jvm",
    "pyserini.encode": "pyserini_ext.integration.encode",
    "pyserini.search.lucene._impact_searcher": "pyserini_ext.integration.search_lucene",
    "pyserini.util": "pyserini_ext.integration.prebuilt",
    "pyserini.search.faiss._searcher": "pyserini_ext.integration.search_faiss",
    "pyserini.server": "pyserini_ext.integration.server",
    "pyserini.server.models": "pyserini_ext.integration.server_models",
    "pyserini.server.search_controller": "pyserini_ext.integration.server_controller",
    "pyserini.server.rest.routes.indexes": "pyserini_ext.integration.server_routes",
    "pyserini.server.rest.app": "pyserini_ext.integration.server_rest",
}
