"""Prompt texts shared by the comparators, and the answer-label parsing used by API comparators."""

from __future__ import annotations

#: The pairwise ranking prompt (PRP, Qin et al. 2024, "Large Language Models are Effective Text Rankers with
#: Pairwise Ranking Prompting"), with a one-letter answer so that the first generated token is the label.
#: Placeholders: ``{query}``, ``{first}`` (shown as Passage A), ``{second}`` (shown as Passage B).
PRP_PROMPT = (
    'Given a query "{query}", which of the following two passages is more relevant to the query?\n\n'
    'Passage A: "{first}"\n\n'
    'Passage B: "{second}"\n\n'
    "Output Passage A or Passage B. Answer with the single letter A or B."
)

#: The query-likelihood prompt (UPR, Sachan et al. 2022, "Improving Passage Retrieval with Zero-Shot Question
#: Generation"): the passage is scored by the log-likelihood of the query as the model's answer.
#: Placeholder: ``{passage}``.
QL_PROMPT = "Passage: {passage}\n\nPlease write a question based on this passage."

LABELS = ("A", "B")


def check_prp_prompt(prompt: str) -> str:
    """Return ``prompt`` after checking it has the ``{query}``, ``{first}`` and ``{second}`` placeholders.

    Raises:
        ValueError: a placeholder is missing.
    """
    for field in ("{query}", "{first}", "{second}"):
        if field not in prompt:
            raise ValueError(f"prompt must contain the placeholder {field}")
    return prompt


def parse_label(token: str) -> str | None:
    """Map one answer token or short answer to ``"A"``/``"B"`` ("A", " a", "A.", "Passage B" ...), else None."""
    text = token.strip().strip(".:;,!\"'()*").strip()
    if text.lower().startswith("passage"):
        text = text[len("passage"):].strip()
    text = text.upper()
    return text if text in LABELS else None
