"""Drop-in ActivePRP rerankers for RAG frameworks.

- ``activeprp_integrations.langchain.ActivePRPRerank``: a LangChain ``BaseDocumentCompressor``
  (``pip install "activeprp[langchain]"``).
- ``activeprp_integrations.llama_index.ActivePRPRerank``: a LlamaIndex ``BaseNodePostprocessor``
  (``pip install "activeprp[llama-index]"``).

Importing this package imports no framework; each submodule raises an ImportError naming its extra when the
framework is missing.
"""
