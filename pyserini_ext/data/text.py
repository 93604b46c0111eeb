"""The one text rule: how a record's title and text become the text every model encodes and every index stores,
and the one place where invalid code points are replaced.

JSON allows lone surrogates (`"\\ud800"`), which are no Unicode text: tokenizers raise on them, naming no
document. They (and the noncharacters U+FFFE/U+FFFF) are replaced with U+FFFD here, and a warning counts them.
"""
from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence

logger = logging.getLogger(__name__)

REPLACEMENT = "\ufffd"
_INVALID = re.compile("[\ud800-\udfff\ufffe\uffff]")


def sanitize(text: str) -> tuple[str, int]:
    """(text with invalid code points replaced by U+FFFD, how many were replaced)."""
    return _INVALID.subn(REPLACEMENT, text)


def sanitize_texts(texts: Iterable[str | None], where: str = "input") -> list[str]:
    """Sanitised copies of `texts` (None -> ""); one warning naming `where` counts what was replaced."""
    cleaned, replaced, affected = [], 0, 0
    for text in texts:
        fixed, count = sanitize(text or "")
        cleaned.append(fixed)
        replaced += count
        affected += count > 0
    if replaced:
        logger.warning("%s: replaced %d invalid code point(s) (lone surrogates or noncharacters) with U+FFFD "
                       "in %d text(s)", where, replaced, affected)
    return cleaned


def join_title(title: str | None, text: str | None) -> str:
    """Title and text, each stripped, joined by one space (either may be empty or None)."""
    return " ".join(part for part in ((title or "").strip(), (text or "").strip()) if part)


def document_text(doc: Mapping[str, str | None]) -> str:
    """What every encoder, indexer and trainer reads for a corpus record `{"title", "text"}`."""
    return join_title(doc.get("title"), doc.get("text"))


def document_texts(texts: Sequence[str | None], titles: Sequence[str | None] | None = None,
                   where: str = "documents") -> list[str]:
    """Pyserini's batch form (`--fields title text` gives parallel lists, None for empty fields), sanitised."""
    joined = [join_title(None, t) for t in texts] if titles is None else [
        join_title(title, text) for title, text in zip(titles, texts)]
    return sanitize_texts(joined, where)


def corpus_fingerprint(corpus: Mapping[str, Mapping[str, str | None]]) -> str:
    """Hash of the docids and texts in order: an encoding cache records it and is refused for another corpus."""
    import hashlib

    digest = hashlib.sha256()
    for docid, doc in corpus.items():
        digest.update(f"{docid}\0{document_text(doc)}\0".encode("utf-8", "surrogatepass"))
    return digest.hexdigest()[:16]
