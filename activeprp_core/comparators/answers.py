"""Reading a chat model's answer to the PRP prompt, shared by every remote provider (see ``answer_from``).
Bodies are untrusted JSON: any field may hold any value, so every reader here returns a value or raises
``ValueError``, never another exception."""

from __future__ import annotations

import math
import numbers
from typing import Any, NamedTuple

from .prompts import parse_answer, parse_label


class Answer(NamedTuple):
    """One parsed answer: P(first preferred) in [0, 1], and the tokens the endpoint reported (0 = unknown)."""

    prob: float
    prompt_tokens: int = 0
    completion_tokens: int = 0


class BilledReply(ValueError):
    """A 200 body that gives no answer, with the tokens the endpoint reported for it (it billed them)."""

    def __init__(self, message: str, prompt_tokens: int = 0, completion_tokens: int = 0) -> None:
        super().__init__(message)
        self.prompt_tokens, self.completion_tokens = prompt_tokens, completion_tokens


class UnusableAnswer(BilledReply):
    """A reply that is no usable answer (neither A nor B: what a prompt can cause), with its tokens."""


class NoReply(BilledReply):
    """A 200 body that holds no reply at all (no choices: e.g. a gateway's error), with the tokens it reports."""


def field(obj: Any, name: str) -> Any:
    """``obj.name`` for a client's model objects, ``obj[name]`` for a dict, else None (str, number, list ...)."""
    if isinstance(obj, dict):
        return obj.get(name)
    if obj is None or isinstance(obj, (str, bytes, int, float, list)):
        return None
    return getattr(obj, name, None)


def token_count(value: Any) -> int:
    """``value`` when it is an int >= 0 (bools refused), else 0."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 0 else 0


def snippet(value: Any) -> str:
    """A short, safe description of ``value`` for error messages (a str's start, else its type)."""
    return repr(value if isinstance(value, str) else type(value).__name__)[:60]


def prob_from_logprobs(logprobs: Any) -> float | None:
    """P(A) = mass(A) / (mass(A) + mass(B)) over the top alternatives of the first answer token, from OpenAI's
    ``logprobs`` object (``{"content": [{"top_logprobs": [{"token", "logprob"}, ...]}, ...]}``, also LangChain's
    ``response_metadata["logprobs"]``); "A", " a", "Passage A" ... count as A. None when no alternative is A/B.

    Raises:
        ValueError: an A/B alternative whose logprob is not a real number <= 0 (-inf allowed, +1e-6 of rounding).
    """
    entries = field(logprobs, "content")
    tops = field(entries[0], "top_logprobs") if isinstance(entries, list) and entries else None
    mass = {"A": 0.0, "B": 0.0}
    for top in tops if isinstance(tops, list) else ():
        token = field(top, "token")
        label = parse_label(token) if isinstance(token, str) else None
        if label is not None:
            value = field(top, "logprob")
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or math.isnan(value) or value > 1e-6:
                raise ValueError(f"invalid logprob {str(value)[:20]!r}")
            mass[label] += math.exp(min(float(value), 0.0))
    total = mass["A"] + mass["B"]
    return mass["A"] / total if total > 0 else None


def prob_from_text(content: Any) -> float:
    """1.0 for a generated answer that gives A ("A", " a", "Passage A.", "Answer: A", "Passage A is more
    relevant." ...: ``prompts.parse_answer``), 0.0 for B; ``ValueError`` for a non-str or an answer that does not
    give exactly one of them ("A passage ...", "Neither", "Passage A is less relevant than Passage B" ...)."""
    if not isinstance(content, str):
        raise ValueError(f"no answer: content is {snippet(content)} and no A/B logprobs")
    label = parse_answer(content)
    if label is None:
        raise ValueError(f"unparseable answer {content[:40]!r}")
    return float(label == "A")


def answer_from(logprobs: Any, content: Any, prompt_tokens: Any, completion_tokens: Any, *,
                finish_reason: Any = None, refusal: Any = None) -> Answer:
    """The ``Answer`` of one reply: P(A) from ``logprobs`` when they hold A or B, else from ``content``; token
    counts that are not ints >= 0 count 0.

    Raises:
        UnusableAnswer: with the reply's tokens; why: see ``prob_from_logprobs`` and ``prob_from_text``, followed by
            what the endpoint said of its answer (``why_no_answer``: ``finish_reason``, the message's ``refusal``).
    """
    tokens = token_count(prompt_tokens), token_count(completion_tokens)
    try:
        prob = prob_from_logprobs(logprobs)
        if prob is None:
            prob = prob_from_text(content)
    except ValueError as err:
        raise UnusableAnswer(str(err) + why_no_answer(finish_reason, refusal), *tokens) from None
    return Answer(prob, *tokens)


def choice_said(choice: Any) -> dict[str, Any]:
    """What a chat completion's choice (OpenAI's ``choices[i]``: a dict, or the SDK's object, which LlamaIndex
    keeps as ``ChatResponse.raw``) says of its answer, as ``answer_from``'s keywords: its ``finish_reason`` and
    its message's ``refusal``."""
    return {"finish_reason": field(choice, "finish_reason"), "refusal": field(field(choice, "message"), "refusal")}


def error_said(error: Any) -> str | None:
    """The message of a 200 body's ``error`` member (``{"error": {"message": ...}}``, as some proxies answer an error),
    as a reason says it ("the endpoint said 'model overloaded'"); None when it has none."""
    said = field(error, "message")
    return f"the endpoint said {said[:100]!r}" if isinstance(said, str) and said else None


FINISHED = {"length": "max_tokens cut the answer", "content_filter": "the endpoint's content filter stopped it"}
"""What a chat completion's ``finish_reason`` says of an answer that was no A or B (other values are shown as
they are; "stop", a finished answer, says nothing)."""


def why_no_answer(finish_reason: Any, refusal: Any) -> str:
    """What the endpoint said of a reply that was no usable answer, as a suffix of its reason ("" for nothing):
    the model's ``refusal`` (OpenAI's ``message.refusal``) and a ``finish_reason`` other than "stop"
    (``FINISHED``)."""
    said = []
    if isinstance(refusal, str) and refusal.strip():
        said.append(f"the model refused: {refusal.strip()[:60]!r}")
    if isinstance(finish_reason, str) and finish_reason and finish_reason != "stop":
        meaning = FINISHED.get(finish_reason)
        said.append(f"finish_reason {finish_reason[:30]!r}" + (f": {meaning}" if meaning else ""))
    return f" ({'; '.join(said)})" if said else ""
