"""Drop-in ActivePRP rerankers for RAG frameworks, and Ray Data for offline batches.

- ``activeprp_integrations.langchain.ActivePRPRerank``: a LangChain ``BaseDocumentCompressor``
  (``pip install "activeprp[langchain]"``).
- ``activeprp_integrations.llama_index.ActivePRPRerank``: a LlamaIndex ``BaseNodePostprocessor``
  (``pip install "activeprp[llama-index]"``).
- ``activeprp_integrations.ray.rerank_dataset``: rerank a Ray dataset of queries on an actor pool
  (``pip install "activeprp[ray]"``).

Importing this package imports no framework; each submodule raises an ImportError naming its extra when the
framework is missing.
"""
