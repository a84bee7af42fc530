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


@pytest.fixture(scope="module")
def tiny_rwkv(tmp_path_factory, tok):
    return save_tiny(tmp_path_factory.mktemp("tiny-rwkv"), tok, "rwkv")


@pytest.mark.parametrize("kind", ["rwkv", "llama"])
@pytest.mark.parametrize("mode", ["ab", "query_likelihood"])
def test_a_prompt_gets_the_same_answer_alone_and_in_a_batch_of_longer_ones(request, kind, mode):
    """Review s67f finding 2: prompts were padded on the left, and a recurrent model that ignores the attention mask
    (RWKV, RecurrentGemma) ran the pads through its state: P(A) moved with the other prompts in the pass (0.4375
    alone, 0.4794 beside a longer prompt). Now pads come after each prompt, which is exact for any causal model."""
    model = request.getfixturevalue(f"tiny_{kind}")
    long = Candidate("c", "the quick brown fox jumps over the lazy dog " * 5)
    items = [("fox", A, B), ("fox", long, A), ("how long do fleas live", B, long), ("x", long, long)]
    one = TransformersComparator(model, mode=mode, batch_size=1)
    many = TransformersComparator(model, mode=mode, batch_size=8)
    alone = [j.prob for j in one.judge_batch(items)]
    batched = [j.prob for j in many.judge_batch(items)]
    assert many.forward_passes == 1 and one.forward_passes > 1
    assert batched == pytest.approx(alone, abs=1e-5)
    assert len({round(p, 4) for p in alone}) > 1  # the pairs get different answers
