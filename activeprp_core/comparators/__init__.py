"""Real pairwise comparators: a local Hugging Face model and OpenAI-compatible chat APIs.

Importing this package imports neither torch, transformers nor openai; they load when a comparator is built,
and a missing one raises ``ImportError`` naming the extra to install (``activeprp[hf]`` / ``activeprp[openai]``).
"""

from .hf import TransformersComparator, bundled_model_dir
from .openai_chat import OpenAIChatComparator
from .prompts import PRP_PROMPT, QL_PROMPT

__all__ = ["PRP_PROMPT", "QL_PROMPT", "OpenAIChatComparator", "TransformersComparator", "bundled_model_dir"]
