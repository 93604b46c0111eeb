"""Text handling our Pyserini encoders share (device and precision live in encode/runtime.py)."""
from __future__ import annotations


def join_titles(texts: list[str | None], titles: list[str | None] | None) -> list[str]:
    """Pyserini's convention for title + text inputs (`--fields title text`); its reader gives None for
    empty fields."""
    if titles is None:
        return [text or "" for text in texts]
    return [f"{title} {text or ''}".strip() if title else text or "" for title, text in zip(titles, texts)]
