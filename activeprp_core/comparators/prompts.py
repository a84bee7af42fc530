"""Prompt texts shared by the comparators, the one function that fills them in (``render``; ``render_pieces``
keeps the values apart), copies of a comparator with other prompts (``SwappablePrompts``), chat messages and their
token bound, and answer labels.

Templates are plain text with named placeholders (``PLACEHOLDERS``). Only those names are substituted, so any
other brace (a JSON example such as ``{"answer": "A"}``) is kept as written; ``{{`` is not an escape."""

from __future__ import annotations

import copy
import itertools
import re
from typing import Any, TypeVar

from ..budget import check_count, check_flag

PRP_PROMPT = (
    'Given a query "{query}", which of the following two passages is more relevant to the query?\n\n'
    'Passage A: "{first}"\n\n'
    'Passage B: "{second}"\n\n'
    "Output Passage A or Passage B. Answer with the single letter A or B."
)
"""The pairwise ranking prompt (PRP, Qin et al. 2024, "Large Language Models are Effective Text Rankers with
Pairwise Ranking Prompting"), with a one-letter answer so that the first generated token is the label."""

QL_PROMPT = "Passage: {passage}\n\nPlease write a question based on this passage."
"""The query-likelihood prompt (UPR, Sachan et al. 2022, "Improving Passage Retrieval with Zero-Shot Question
Generation"): ``{passage}`` is scored by the log-likelihood of the query as the model's answer."""

LABELS = ("A", "B")

PLACEHOLDERS: dict[str, tuple[str, ...]] = {"prompt": ("query", "first", "second"), "ql_prompt": ("passage",),
                                            "system_prompt": ()}
"""Prompt attribute of a comparator -> the placeholders its template must contain (``system_prompt`` may be None)."""

_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def model_text(text: str) -> str:
    """``text`` as a model can take it: lone surrogates (only JSON escapes such as ``"\\ud800"`` can produce them;
    tokenizers, UTF-8 and HTTP clients refuse them) become U+FFFD."""
    return _SURROGATE.sub("\ufffd", text)


Piece = tuple[str, bool]
"""One part of a rendered prompt: (text, whether it is a value filled in, e.g. a query or passage). A local model
tokenizes values as plain text, so a passage that spells a control token such as ``<|im_end|>`` cannot act as one."""


def render_pieces(template: str, **values: str) -> list[Piece]:
    """``render`` as pieces, in order: the template's text (``False``) and the values filled in (``True``, as
    ``model_text`` of them). Empty texts are left out; joining the texts gives ``render``'s string."""
    pieces: list[Piece] = []
    at = 0
    for m in _PLACEHOLDER.finditer(template):
        if m.group(1) in values:
            pieces += [(template[at : m.start()], False), (model_text(values[m.group(1)]), True)]
            at = m.end()
    pieces.append((template[at:], False))
    return [p for p in pieces if p[0]]


def render(template: str, **values: str) -> str:
    """``template`` with each ``{name}`` placeholder whose name is a keyword of ``values`` replaced by that value
    (``model_text`` of it), in one pass (a value containing ``{second}`` is not substituted again); every other
    brace is kept as is."""
    return "".join(text for text, _ in render_pieces(template, **values))


def check_prompt(name: str, template: Any) -> Any:
    """Return ``template`` after checking it suits the comparator attribute ``name`` (see ``PLACEHOLDERS``).

    Raises:
        TypeError: not a str (None is allowed for ``system_prompt`` only).
        ValueError: a required placeholder is missing, or ``name`` is not a known prompt attribute.
    """
    if name not in PLACEHOLDERS:
        raise ValueError(f"unknown prompt {name!r}; prompts are {sorted(PLACEHOLDERS)}")
    if template is None and name == "system_prompt":
        return None
    if not isinstance(template, str):
        raise TypeError(f"{name} must be a str, got {type(template).__name__}")
    for field in PLACEHOLDERS[name]:
        if "{" + field + "}" not in template:
            raise ValueError(f"{name} must contain the placeholder {{{field}}}")
    return template


C = TypeVar("C", bound="SwappablePrompts")


class SwappablePrompts:
    """Mixin for comparators that hold prompt templates as attributes, listed in ``prompt_names``: ``with_prompts``
    gives a copy that asks with other templates, so a caller (e.g. LlamaIndex's ``_update_prompts``) never changes
    a comparator someone else may share. Override ``reset_prompt_state`` to drop template-dependent state."""

    prompt_names: tuple[str, ...] = ("prompt",)

    def with_prompts(self: C, **prompts: Any) -> C:
        """A copy of this comparator using the given templates (keywords from ``prompt_names``, e.g. ``prompt=``,
        ``ql_prompt=``); the original is unchanged. The copy shares what is expensive and stateless (the loaded
        model, the HTTP clients: closing either closes them) and starts with empty prompt-dependent state.

        Raises:
            ValueError: an unknown template name, or a template without its placeholders. TypeError: not a str.
        """
        unknown = sorted(set(prompts) - set(self.prompt_names))
        if unknown:
            raise ValueError(f"{type(self).__name__} has no prompt {unknown[0]!r}; its prompts are "
                             f"{list(self.prompt_names)}")
        checked = {name: check_prompt(name, value) for name, value in prompts.items()}
        new = copy.copy(self)
        new.__dict__.update(checked)
        new.reset_prompt_state()
        return new

    def reset_prompt_state(self) -> None:
        """Drop state that depends on the templates (called on the copy made by ``with_prompts``)."""


CHAT_TOKENS_PER_MESSAGE = 8
"""Tokens a chat template adds around one message at most (role markers, the role name, separators)."""
CHAT_TOKENS_PER_PROMPT = 64
"""Tokens a chat template adds once per prompt at most: BOS, the generation prompt, a default system message."""
TOP_LOGPROBS = 5
"""The default ``top_logprobs`` of the chat judges: the answer token's alternatives asked for."""
MAX_PASSAGE_WORDS = 200
"""The default ``max_passage_words`` of the chat judges: each passage is cut to this many words (``cut_words``:
a character of Chinese, Japanese, Thai ... counts as one)."""
ANSWER_TOKENS = 1
"""The completion tokens a chat judge asks for (``max_tokens``): a one-token answer, A or B."""
MAX_TOP_LOGPROBS = 20
"""The most ``top_logprobs`` an OpenAI-compatible chat endpoint takes (OpenAI answers 400 above it): the limit of
every chat judge that asks for them (``OpenAIChatComparator``, the framework judges)."""


def check_top_logprobs(value: object) -> int:
    """``value`` as the ``top_logprobs`` of a chat judge: an int from 0 to ``MAX_TOP_LOGPROBS`` (``check_count``).

    Raises:
        TypeError: not an int (bools refused). ValueError: below 0 or above ``MAX_TOP_LOGPROBS``.
    """
    top = check_count(value, "top_logprobs", minimum=0)
    if top > MAX_TOP_LOGPROBS:
        raise ValueError(f"top_logprobs must be <= {MAX_TOP_LOGPROBS} (the API's limit), got {top}")
    return top


NO_SPACE_SCRIPTS = ("\u0e00-\u0eff"  # Thai, Lao
                    "\u1000-\u109f\ua9e0-\ua9ff\uaa60-\uaa7f"  # Myanmar
                    "\u1780-\u17ff\u19e0-\u19ff"  # Khmer
                    "\u2e80-\u2fdf\u3001-\u303f\u3040-\u30ff\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf"
                    "\u4e00-\u9fff\uf900-\ufaff\ufe30-\ufe4f\uff01-\uffef\U00020000-\U0003ffff")  # CJK
"""The characters ``cut_words`` counts one unit each, as a regular-expression class: the scripts written without
spaces between words (Han with its radicals, punctuation and compatibility ideographs, Hiragana, Katakana,
Bopomofo, fullwidth and halfwidth forms; Thai, Lao, Khmer, Myanmar)."""
CUT_RUN_CHARS = 128
"""``cut_words`` counts a run of other non-space characters longer than this as one unit per this many characters
(a URL, base64, minified code): longer than any word of the shipped collections (123 characters at most in MS MARCO
DL19/DL20, SciFact, NovelEval and Cranfield), so their words stay one unit each."""
_CUT_UNIT = re.compile(f"[{NO_SPACE_SCRIPTS}]|[^\\s{NO_SPACE_SCRIPTS}]{{1,{CUT_RUN_CHARS}}}")


def cut_words(text: str, max_words: int) -> str:
    """``text`` cut to its first ``max_words`` units, a rough token estimate for judges whose tokenizer is not at
    hand (the chat judges' ``max_passage_words``, serve's ``max_tokens_per_doc``); unchanged when it has no more.

    A unit is a whitespace-separated word (``str.split``), except that inside a word each character of a script
    written without spaces (``NO_SPACE_SCRIPTS``: Chinese, Japanese, Thai, Lao, Khmer, Myanmar) is one unit, and a
    run of other characters longer than ``CUT_RUN_CHARS`` is one unit per ``CUT_RUN_CHARS`` characters. So such
    text is cut too, where counting words would keep it whole (a 10,000-character Chinese passage is one "word").
    Measured with the bundled SmolLM2's tokenizer: an English word of MS MARCO DL19 is 1.4 tokens on average, a
    Chinese or Japanese character 1.75, a Thai character 1.9, Khmer 2.2, Lao and Myanmar 3; a run of 128 URL
    characters about 50, of base64 about 100 (that bound is loose, so that ordinary words keep counting as one).
    Text whose words are each of other scripts and at most ``CUT_RUN_CHARS`` characters long (English, the shipped
    collections) is cut exactly as by words: its first ``max_words`` words joined by single spaces. A cut inside
    a word keeps the word's first units; the units kept are joined as written when adjacent, by one space when
    whitespace separated them."""
    units = list(itertools.islice(_CUT_UNIT.finditer(text), max_words + 1))
    if len(units) <= max_words:
        return text
    kept = [units[0].group()] if max_words else []
    for before, unit in zip(units, units[1:max_words]):
        kept.append(unit.group() if unit.start() == before.end() else " " + unit.group())
    return "".join(kept)


def prp_messages(prompt: str, system_prompt: str | None, query: str, first: str, second: str) -> list[dict[str, str]]:
    """The chat messages of one ordered pair: the optional system message, then the rendered PRP ``prompt``."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": render(prompt, query=query, first=first, second=second)})
    return messages


class ChatPrompts(SwappablePrompts):
    """Mixin of the chat judges (``OpenAIChatComparator``, the framework judges): the keywords they share, checked
    once (``set_chat_settings``), and the chat messages of one ordered pair with each passage cut to
    ``max_passage_words`` words (``cut_words``), the same bytes whichever provider carries them."""

    prompt_names = ("prompt", "system_prompt")
    prompt: str
    system_prompt: str | None
    logprobs: bool
    top_logprobs: int
    max_passage_words: int

    def set_chat_settings(self, *, prompt: Any, system_prompt: Any, logprobs: Any, top_logprobs: Any,
                          max_passage_words: Any) -> None:
        """Checks and sets the keywords every chat judge takes: the templates ``prompt`` and ``system_prompt``
        (``check_prompt``), ``logprobs`` (a bool: ``check_flag``), ``top_logprobs`` (``check_top_logprobs``) and
        ``max_passage_words`` (an int >= 1).

        Raises:
            TypeError: a template that is not a str, a ``logprobs`` that is not a bool, a count that is not an int.
            ValueError: a template without its placeholders, a count out of range.
        """
        self.max_passage_words = check_count(max_passage_words, "max_passage_words", minimum=1)
        self.top_logprobs = check_top_logprobs(top_logprobs)
        self.logprobs = check_flag(logprobs, "logprobs")
        self.prompt, self.system_prompt = check_prompt("prompt", prompt), check_prompt("system_prompt", system_prompt)

    def messages(self, query: str, first: str, second: str) -> list[dict[str, str]]:
        """``prp_messages`` of one ordered pair, each passage cut by ``cut_words``."""
        n = self.max_passage_words
        return prp_messages(self.prompt, self.system_prompt, query, cut_words(first, n), cut_words(second, n))


def chat_token_bound(messages: list[dict[str, str]], completion_tokens: int) -> int:
    """An upper bound on the tokens of one chat request for any tokenizer whose every token covers at least one
    byte (byte-level BPE, byte fallback): the UTF-8 bytes of each message's role and content, plus the template's
    ``CHAT_TOKENS_PER_*`` and the ``completion_tokens`` requested (max_tokens); about 4x the real count."""
    size = sum(len(m["role"].encode()) + len(m["content"].encode()) + CHAT_TOKENS_PER_MESSAGE for m in messages)
    return size + CHAT_TOKENS_PER_PROMPT + completion_tokens


def parse_label(token: str) -> str | None:
    """Map one answer token, or a text that is nothing but a label, to ``"A"``/``"B"`` ("A", " a", "A.", "(B)",
    "Passage B" ...), else None. Strict on purpose: it reads the top-logprob tokens (``answers.prob_from_logprobs``),
    where anything more than a label is another token. A generated answer goes to ``parse_answer``."""
    text = token.strip().strip(".:;,!\"'()*").strip()
    if text.lower().startswith("passage"):
        text = text[len("passage"):].strip()
    text = text.upper()
    return text if text in LABELS else None


_OPEN = r"[ \n*_`\"'#>(\[\u201c\u2018]*"
_CLOSE = r"[*_`\"')\]\u201d\u2019]*"
_LEAD_IN = r"(?:(?:the|my|final) )*(?:answer|output)(?: is:?|:)|(?:the )?(?:more|most) relevant (?:passage |one )?is:?"
_ANSWER = re.compile(
    rf"{_OPEN}(?:(?:{_LEAD_IN}){_OPEN})?(?:passage ?(?P<passage>[ab])(?! ?:[ \n]?[\"\u201c])|(?P<letter>[ab])){_CLOSE}"
    rf"(?: is (?:the )?(?:more|most) relevant(?: passage| one)?(?: to the (?:query|question))?"
    rf"(?: than (?:passage )?(?P<than>[ab]))?{_CLOSE}(?:[.!](?=[ \n]|$)|[.:;!]?(?=\n|$))|[.:;!]?(?=\n|$)|[.!](?= ))",
    re.IGNORECASE)
_LEADING_CHARS = 200
"""The leading answer is looked for in this many characters of the answer (its whitespace runs made one each):
enough for markup, a lead-in and the label, and a bound on the regular expression's work whatever the reply's
length."""
_NAMES = {"A": re.compile(r"(?i:passage ?a)\b|\bA\b|\ba\b(?! ?[a-z])"), "B": re.compile(r"(?i:passage ?b|\bb)\b")}
"""A mention of each label anywhere: "Passage A", the capital letter, or a lowercase "a" that is no article (no word
follows it); any "b"."""


def parse_answer(text: str) -> str | None:
    """The label, ``"A"`` or ``"B"``, that a generated answer to the PRP prompt gives, else None: a chat model
    (no logprobs, or a completion cap it ignores) often writes more than the one letter asked for.

    Read, case-insensitively, with leading spaces and markup (``* _ ` " ' # > ( [``) skipped:
    - a text that is only a label (``parse_label``: "A", " a", "A.", "A)", "Passage B", "**Passage B:**");
    - else an answer at the very start: an optional lead-in ("Answer:", "The answer is", "The final answer is",
      "Output:", "The more relevant passage is"), the label ("A" or "Passage A", markup around it allowed), then
      the end of the line (a closing ``. : ; !`` allowed), or ``.``/``!`` and a space (the sentence ends), or
      "is (the) more/most relevant", optionally "to the query" and "than (Passage) <the other label>", ending the
      sentence. So "A\n\nExplanation: ...", "A. Passage A answers the query", "**A**", "Answer: A", "The answer
      is (Passage) B", "Passage B is more relevant than Passage A.";
    - provided nothing after that answer names the other label ("Passage B", a capital "B", a lowercase "b", a
      lowercase "a" that is no article): a model that goes on to the other passage may be correcting itself ("A.
      However, on reflection, the answer is B."), and telling that from an explanation would be guessing.

    Not read (None), because the text does not commit to one label:
    - a letter that goes on as a word: the article in "A passage about ...", "A better answer is B", and "A or
      B", "A, B", "A/B", "A?" (a question), "Both", "Neither", refusals, "I think A";
    - a label that goes on in its sentence other than as above: "Passage A is less relevant than Passage B" names A
      first and means B; "Passage A is more relevant to cooking, while ..."; "**Passage A** is ...", "A) because
      ...", and "A: ..." / "Passage A: ..." (a heading that may go on to discuss each passage in turn, or the
      prompt's own ``Passage A: "..."`` echoed);
    - any later mention of the other label (above), even where it only explains: "B. A is off-topic.";
    - an answer that does not end within the first ``_LEADING_CHARS`` characters (whitespace runs counted as one).

    The work is linear in the answer's length (a reply may be up to ``max_reply_bytes``).

    Raises:
        TypeError: ``text`` is not a str.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    label = parse_label(text)
    if label is not None:
        return label
    flat = re.sub(r"\s+", lambda m: "\n" if "\n" in m.group() else " ", text)
    window = flat[:_LEADING_CHARS]
    match = _ANSWER.match(window)
    if match is None or match.end() == len(window) < len(flat):  # the window's end is not the answer's
        return None
    label = (match.group("passage") or match.group("letter")).upper()
    other = "B" if label == "A" else "A"
    than = match.group("than")
    if (than is not None and than.upper() != other) or _NAMES[other].search(flat, match.end()):
        return None
    return label
