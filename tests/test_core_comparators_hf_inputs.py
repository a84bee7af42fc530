"""TransformersComparator's inputs on tiny random-weight causal models built with the bundled SmolLM2 tokenizer:
queries without tokens, padding of mixed-length batches, cutting long and multi-byte passages, answer labels."""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_core_comparators_hf import save_tiny_t5

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


ZH = "跳蚤的生命周期包括卵、幼虫、蛹和成虫四个阶段，整个过程通常需要两周到八个月，取决于温度和湿度。" * 10
PIECES = [*"跳蚤的生命周期包括卵，。", "😀", "🇫🇷", "é", "e\u0301", "ｆｉ", " ", "  ", "\n", "fleas", "a", "7",
          "<|im_end|>"]


def check_cut(lm, text, n):
    """``lm.truncate(text, n)``: a prefix of ``text`` of at most ``n`` tokens, ``text`` itself when it has no more."""
    cut = lm.truncate(text, n)
    assert text.startswith(cut) and len(lm.text_ids(cut)) <= n, (text, n, cut)
    assert "\ufffd" not in cut
    if len(lm.text_ids(text)) <= n:
        assert cut == text
    return cut


def test_a_cut_cjk_passage_is_a_prefix_of_whole_characters(tiny_llama):
    """Review s67f finding 4: the cut decoded the first n token ids, and a byte-level BPE spreads a CJK character
    over several tokens: 93 of 199 cut lengths of this passage ended in U+FFFD, which is no prefix of it and can
    re-tokenize to n + 1 tokens. Now the passage is cut where a kept token ends (the tokenizer's offsets)."""
    lm = TransformersComparator(tiny_llama, mode="ab").lm
    kept = [len(lm.text_ids(check_cut(lm, ZH, n))) for n in range(1, 200)]
    assert all(n - k <= 2 for n, k in zip(range(1, 200), kept))  # the few tokens of the character it stops before


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.sampled_from(PIECES), min_size=1, max_size=40), n=st.integers(1, 40))
def test_a_cut_text_is_a_prefix_within_the_token_limit(tiny_llama, pieces, n):
    check_cut(TransformersComparator(tiny_llama, mode="ab").lm, "".join(pieces), n)  # the model: loaded once


@pytest.fixture(scope="module")
def byte_t5(tmp_path_factory):
    """A tiny random T5 with ByT5's tokenizer: a Python one (no offsets), one token per UTF-8 byte."""
    from transformers import ByT5Tokenizer

    return save_tiny_t5(tmp_path_factory.mktemp("byte-t5"), ByT5Tokenizer())


def test_a_python_tokenizer_cuts_a_prefix_of_whole_characters_too(byte_t5):
    comp = TransformersComparator(byte_t5, mode="ab")
    assert not comp.tokenizer.is_fast
    for n in range(1, 40):
        assert len(check_cut(comp.lm, ZH, n)) == n // 3  # three bytes a character
    assert 0.0 < comp.compare(ZH, [(Candidate("a", ZH), Candidate("b", "fleas"))])[0] < 1.0


class Spy:
    """A tokenizer that records the length of each text it tokenizes."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer, self.lengths = tokenizer, []

    def __call__(self, text, *args, **kwargs):
        self.lengths.append(len(text))
        return self.tokenizer(text, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


@pytest.mark.parametrize("mode", ["ab", "query_likelihood"])
def test_cutting_a_long_passage_tokenizes_a_bounded_head_of_it(tiny_llama, mode, monkeypatch):
    """Review s67f finding 3: each prompt tokenized each whole passage about 10 times though 256 tokens are kept
    (1.7 s per prompt for 200,000 characters, and a rerank under time_budget=2.0 ran 9.6 s with 0 calls). Now a
    cut tokenizes a head of the passage that grows with the tokens kept; the prompt is the same."""
    comp = TransformersComparator(tiny_llama, mode=mode, max_passage_tokens=256)
    words = "A flea's life cycle has four stages: egg, larva, pupa and adult; 跳蚤的生命周期. "
    long = words * (2_000_000 // len(words))
    build = comp.ab_prompt_ids if mode == "ab" else comp.ql_prompt_ids
    args = ("how long do fleas live", long, "dogs bark") if mode == "ab" else ("how long do fleas live", long)
    spy = Spy(comp.tokenizer)
    monkeypatch.setattr(comp.lm, "tokenizer", spy)
    ids = build(*args)
    assert spy.lengths and max(spy.lengths) < 20_000  # the prompts, the passage's head and its cut
    assert build(args[0], long[:20_000], *args[2:]) == ids


def test_no_prompt_is_built_for_a_query_past_its_deadline(tiny_llama, monkeypatch):
    """Review s67f finding 3: every prompt of a call was built before the first deadline check. Now a prompt is
    built only while its query is not too late: with 1 s per prompt built and a deadline at 2.5 s, three prompts
    are built, none run (the deadline has passed), and all six come back unsent."""
    from activeprp_core.comparators import CallGuard
    from activeprp_core.types import UNSENT

    comp, guard, now = TransformersComparator(tiny_llama, mode="ab"), CallGuard(), [0.0]
    build = comp.ab_prompt_ids

    def slow_build(*args):
        now[0] += 1.0
        return build(*args)

    monkeypatch.setattr(comp, "ab_prompt_ids", slow_build)
    guard.clock, guard.deadline = (lambda: now[0]), 2.5
    out = comp.judge("q", [(A, B), (B, A)] * 3, guard=guard)
    assert now[0] == 3.0 and comp.forward_passes == 0
    assert [j.cut for j in out] == [UNSENT] * 6


def test_a_label_that_is_no_single_token_is_refused_saying_what_works(tiny_llama):
    """Review s67f finding 5: answer_prefix="Passage " was refused with "answer label 'A' is not a single token
    after the answer prefix", though the space belongs in the label (SmolLM2's tokenizer makes " A" one token). The
    message now names the prefix and labels that are one token each, and those are accepted."""
    works = "give answer_prefix='Passage' and labels=(' A', ' B')"
    with pytest.raises(ValueError, match=re.escape(works)):
        TransformersComparator(tiny_llama, mode="ab", answer_prefix="Passage ")
    with pytest.raises(ValueError, match=re.escape(works)):
        TransformersComparator(tiny_llama, mode="ab", labels=("Passage A", "Passage B"))
    with pytest.raises(ValueError, match=re.escape("labels of one token each there, such as the default")):
        TransformersComparator(tiny_llama, mode="ab", labels=("Antidisestablishmentarianism", "B"))
    comp = TransformersComparator(tiny_llama, mode="ab", answer_prefix="Passage", labels=(" A", " B"))
    assert comp.tokenizer.convert_ids_to_tokens(comp.label_ids) == ["ĠA", "ĠB"]
