"""Pairwise comparators: the ``Comparator`` base class, a local Hugging Face model, remote models
(``RemoteComparator``, the transport base; ``OpenAIChatComparator``, its OpenAI-compatible provider) and the
simulated judge (``SimulatedComparator``). The benchmarks' own comparators (answer cache, zero-cost, round
recorder) live in ``activeprp_bench``.

Importing this package imports neither torch, transformers nor openai; they load when a comparator is built,
and a missing one raises ``ImportError`` naming the extra to install (``activeprp[hf]`` / ``activeprp[openai]``).
"""

from .base import CallGuard, Comparator, SupportsCompare, as_comparator
from .clients import ComparatorClosed
from .hf import TransformersABComparator, TransformersComparator, bundled_model_dir
from .hf_likelihood import TransformersQLComparator
from .hf_model import clear_model_cache
from .openai_chat import OpenAIChatComparator
from .prompts import PRP_PROMPT, QL_PROMPT
from .remote import RemoteComparator
from .simulated import SimulatedComparator

__all__ = ["PRP_PROMPT", "QL_PROMPT", "CallGuard", "Comparator", "ComparatorClosed", "OpenAIChatComparator",
           "RemoteComparator", "SimulatedComparator", "SupportsCompare", "TransformersABComparator",
           "TransformersComparator", "TransformersQLComparator", "as_comparator", "bundled_model_dir",
           "clear_model_cache"]
