"""Corpus encoding on Ray: shards of the corpus go to Ray actors (one model load per actor, one GPU each where
the cluster has GPUs); the driver merges their outputs, in corpus order, into exactly the index one process
builds: a Pyserini Faiss index (Aggretriever), a DeepCT Lucene index, an AligneR token index.

    encode_on_ray("aggretriever", "models/agg", corpus, "index.agg", workers=2)              # local Ray
    encode_on_ray("deepct", "models/deepct", corpus, "index.deepct", ray_address="auto")   # a running cluster

Only the model runs on the workers; the index writers (Faiss, Lucene through the JVM, the AligneR codecs) run
once, in the driver, on the merged outputs.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

KINDS = ("aggretriever", "deepct", "aligner")


class ShardEncoder:
    """What one Ray actor holds: the model, loaded once; `encode(docs)` gives one shard's model outputs."""

    def __init__(self, kind: str, model: str, options: dict):
        self.kind, self.options = kind, options
        device = options.get("device", "cpu")
        if kind == "aggretriever":
            from pyserini_ext.encode.aggretriever import AggretrieverDocumentEncoder
            self.encoder = AggretrieverDocumentEncoder(model, device=device, **options.get("runtime", {}))
        elif kind == "deepct":
            from pyserini_ext.encode.deepct import RuntimeDeepCTModel
            from pyserini_ext.encode.runtime import EncoderRuntime
            self.encoder = RuntimeDeepCTModel(model, EncoderRuntime(device=device, **options.get("runtime", {})))
            if options.get("max_length"):
                self.encoder.model.max_length = options["max_length"]
        else:
            from pyserini_ext.encode.aligner import AlignerDocumentEncoder
            self.encoder = AlignerDocumentEncoder(model, device=device, **options.get("runtime", {}))

    def encode(self, docs: list[tuple[str, Mapping[str, str]]]):
        if self.kind == "aggretriever":
            batch = self.options.get("batch_size", 32)
            starts = tqdm(range(0, len(docs), batch), desc="encode documents", disable=not self.options.get("progress"))
            return np.concatenate([self.encoder.encode([d.get("text", "") for _, d in docs[i:i + batch]],
                                                       titles=[d.get("title", "") for _, d in docs[i:i + batch]],
                                                       max_length=self.options.get("max_length", 512))
                                   for i in starts])
        if self.kind == "deepct":
            from pyserini_ext.data import document_text
            return self.encoder.word_weights([document_text(d) for _, d in docs], self.options.get("batch_size", 64))
        from pyserini_ext.index.aligner import encode_corpus
        return encode_corpus(self.encoder, dict(docs), progress=False, max_length=self.options.get("max_length"))


def _shards(corpus: Mapping[str, Mapping[str, str]], shards: int) -> list[list[tuple[str, Mapping[str, str]]]]:
    items = list(corpus.items())
    size = -(-len(items) // shards)
    return [items[i:i + size] for i in range(0, len(items), size)]


def encode_on_ray(kind: str, model: str | os.PathLike, corpus: Mapping[str, Mapping[str, str]],
                  output: str | os.PathLike, workers: int = 2, shards: int | None = None,
                  ray_address: str | None = None, options: dict | None = None) -> Path:
    """Encode `corpus` with `workers` Ray actors over `shards` shards (default 4 per worker) and write the index.

    ray_address: None starts a local Ray (or joins the one this process already started); "auto" or
    "ray://host:port" joins a cluster. options: device, batch_size, max_length, runtime (EncoderRuntime fields),
    and for the index writers: deepct {scale, mode, merge (None: the model's index_tf), analyzer}, aligner {beta_d,
    reduction, duplicate_cosine, codec, candidates, pq_m, pq_bits, nlist}.
    """
    import ray
    from ray.util import ActorPool

    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(KINDS)}")
    if not corpus:
        raise ValueError("encode_on_ray: the corpus is empty")
    options = dict(options or {})
    if kind == "deepct":  # the driver writes Lucene: the JVM must start before Ray's threads (after them it crashes)
        import pyserini.index.lucene  # noqa: F401
    if not ray.is_initialized():
        ray.init(address=ray_address, include_dashboard=False, log_to_driver=False)
    gpus = 1 if ray.cluster_resources().get("GPU", 0) >= workers else 0
    if gpus:
        options.setdefault("device", "cuda")
    actor = ray.remote(num_cpus=1, num_gpus=gpus)(ShardEncoder)
    model = str(Path(model).resolve()) if Path(model).exists() else str(model)
    pool = ActorPool([actor.remote(kind, model, options) for _ in range(workers)])
    parts = list(pool.map(lambda a, shard: a.encode.remote(shard), _shards(corpus, shards or 4 * workers)))
    return _write(kind, model, corpus, parts, Path(output), options)


def encode_locally(kind: str, model: str | os.PathLike, corpus: Mapping[str, Mapping[str, str]],
                   output: str | os.PathLike, options: dict | None = None) -> Path:
    """What `encode_on_ray` builds, in this process (the reference the Ray path is tested against)."""
    if kind not in KINDS:
        raise ValueError(f"unknown model kind {kind!r}; known: {', '.join(KINDS)}")
    if not corpus:
        raise ValueError("encode_locally: the corpus is empty")
    options = {"progress": True, **(options or {})}
    model = str(model)
    return _write(kind, model, corpus, [ShardEncoder(kind, model, options).encode(list(corpus.items()))],
                  Path(output), options)


def _write(kind: str, model: str, corpus: Mapping[str, Mapping[str, str]], parts: list, output: Path,
           options: dict) -> Path:
    if kind == "aggretriever":
        from pyserini.encode.optional._faiss import FaissRepresentationWriter

        vectors = np.concatenate(parts)
        writer = FaissRepresentationWriter(str(output), dimension=vectors.shape[1])
        with writer:  # its __enter__ returns None
            writer.write({"id": list(corpus), "vector": vectors})
        return output
    if kind == "deepct":
        from pyserini_ext.index.deepct import build_deepct_index
        from pyserini_ext.models.deepct import DeepCTModel
        from pyserini_ext.models.deepct_terms import DEFAULT_ANALYZER

        loaded = DeepCTModel.from_pretrained(model)
        rule = loaded.index_tf.with_overrides(**{k: options.get(k) for k in ("scale", "mode", "merge")})
        build_deepct_index(_PrecomputedWeights([w for part in parts for w in part],
                                               options.get("max_length") or loaded.max_length), corpus, output,
                           rule, analyzer=options.get("analyzer", DEFAULT_ANALYZER), model_name=model,
                           overwrite=options.get("overwrite", False))
        return output
    from pyserini_ext.index.aligner import EncodedCorpus, build_index

    offsets = np.concatenate([[0], np.cumsum([int(p.offsets[-1]) for p in parts])])
    merged = EncodedCorpus(
        docids=[d for p in parts for d in p.docids],
        offsets=np.concatenate([[0]] + [p.offsets[1:] + start for p, start in zip(parts, offsets)]).astype(np.int64),
        vectors=np.concatenate([p.vectors for p in parts]),
        salience_scores=np.concatenate([p.salience_scores for p in parts]),
        model_info={**parts[0].model_info, "path": model}, truncated=sum(p.truncated for p in parts),
        skipped_empty=[d for p in parts for d in p.skipped_empty])
    index_options = {k: options[k] for k in ("beta_d", "reduction", "duplicate_cosine", "codec", "candidates", "pq_m",
                                             "pq_bits", "nlist", "overwrite") if k in options}
    return build_index(merged, output, progress=False, **index_options)


class _PrecomputedWeights:
    """Stands where build_deepct_index asks a DeepCT model for word weights: the shards' weights, in corpus order."""

    def __init__(self, weights: list, max_length: int):
        self.weights, self.max_length = iter(weights), max_length

    def word_weights(self, texts: list[str], batch_size: int = 64) -> list:
        return [next(self.weights) for _ in texts]
