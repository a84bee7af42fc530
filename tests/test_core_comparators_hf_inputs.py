"""TransformersComparator's inputs on tiny random-weight causal models built with the bundled SmolLM2 tokenizer:
queries without tokens, padding of mixed-length batches, cutting long and multi-byte passages, answer labels."""

from __future__ import annotations

import pytest

from activeprp_core import Candidate, rerank
from activeprp_core.comparators import TransformersComparator, bundled_model_dir

pytest.importorskip("torch", reason='the [hf] extra is not installed (pip install "activeprp[hf]")')
pytestmark = pytest.mark.slow  # the bundled model's tokenizer


def save_tiny(path, tok, kind):
    """A 2-layer random causal LM of ``kind`` for ``tok``'s vocab, saved with ``tok`` under ``path``."""
    import torch
    import transformers as tf

    configs = {
        "llama": lambda: tf.LlamaForCausalLM(tf.LlamaConfig(
            vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
            num_key_value_heads=1)),
        # a recurrent model whose forward ignores the attention mask
        "rwkv": lambda: tf.RwkvForCausalLM(tf.RwkvConfig(
            vocab_size=len(tok), hidden_size=64, num_hidden_layers=2, attention_hidden_size=64,
            intermediate_size=128, context_length=1024)),
    }
    torch.manual_seed(0)
    configs[kind]().save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def tok():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(bundled_model_dir(), local_files_only=True)


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory, tok):
    return save_tiny(tmp_path_factory.mktemp("tiny-llama"), tok, "llama")


A, B = Candidate("a", "fleas live three months"), Candidate("b", "dogs bark")


def test_query_likelihood_refuses_a_query_without_tokens_before_any_pass(tiny_llama):
    """Review s67f finding 1: an empty query has no tokens, its mean log-probability was 0/0 = NaN, every call
    "failed" (the rerank blamed the judge: ComparatorUnavailable) and passage_scores returned NaN. Now a
    ValueError saying what to change, before any forward pass."""
    comp = TransformersComparator(tiny_llama, mode="query_likelihood")
    no_tokens = "the query '' has none: give a query with text"
    with pytest.raises(ValueError, match=no_tokens):
        comp.judge("", [(A, B)])
    with pytest.raises(ValueError, match=no_tokens):
        comp.passage_scores("", [A.text, B.text])
    with pytest.raises(ValueError, match=no_tokens):
        rerank("", [A, B, Candidate("c", "cats")], comparator=comp, budget=4, on_failure="prior")
    assert comp.forward_passes == 0
    assert comp.passage_scores(" ", [A.text])[0] < 0  # a blank with a token (SmolLM2's) is scored, as in mode ab
