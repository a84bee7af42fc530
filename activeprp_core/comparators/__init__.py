"""Pairwise comparators: the ``Comparator`` base class, a local Hugging Face model, OpenAI-compatible chat APIs,
and the simulated judge (``SimulatedComparator``). The benchmarks' own comparators (answer cache, zero-cost,
round recorder) live in ``activeprp_bench``.

Importing this package imports neither torch, transformers nor openai; they load when a comparator is built,
and a missing one raises ``ImportError`` naming the extra to install (``activeprp[hf]`` / ``activeprp[openai]``).
"""

from .base import CallGuard, Comparator, SupportsCompare, as_comparator
from .hf import TransformersComparator, bundled_model_dir
from .openai_chat import OpenAIChatComparator
from .prompts import PRP_PROMPT, QL_PROMPT
from .simulated import SimulatedComparator

__all__ = ["PRP_PROMPT", "QL_PROMPT", "CallGuard", "Comparator", "OpenAIChatComparator", "SimulatedComparator",
           "SupportsCompare", "TransformersComparator", "as_comparator", "bundled_model_dir"]
