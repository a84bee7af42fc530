"""The request bodies of ``activeprp serve`` (Cohere v1/v2, TEI) and the server's caps on them (``Limits``)."""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, get_type_hints

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, create_model, field_validator, model_validator
from pydantic_core import PydanticCustomError

from activeprp_cli.rerank import setting_flag
from activeprp_core.comparators.prompts import model_text
from activeprp_core.settings import CAPS, FIELDS, PER_REQUEST, SPECS, Count, RerankSettings, Seconds

from . import MAX_BODY_BYTES  # its home is the command's defaults (its --help states it)

MAX_RANK_FIELDS = 64
"""The most names in a body's ``rank_fields`` (more: 400). Each document is looked up for each name: 30,000 names
and 1000 documents, in a 0.3 MB body, held the event loop 0.55 s. Cohere's ``rank_fields`` names a few keys."""


Flag = Annotated[bool, BeforeValidator(lambda value: False if value is None else value)]
"""An optional boolean of a body, false by default: ``null`` is that default, as it is for the other optional
fields (``top_n``, ``model``, ...); TEI declares its ``truncate`` nullable, and clients that serialise unset
fields as null (Jackson, some LiteLLM paths) send it. Jina's ``return_documents``, true by default, is set by its
route when null or missing."""


class _Body(BaseModel):
    """Fields a body's API has and the server does not read (Cohere's ``max_chunks_per_doc``, TEI's
    ``truncation_direction``, ...) are ignored; the names of settings it does not take are refused
    (``_Settings``)."""

    model_config = ConfigDict(strict=True, extra="ignore")


BODY_FIELDS: dict[str, str] = {name: {"top_k": "top_n"}.get(name, name) for name in PER_REQUEST}
"""Each setting a request may carry (``settings.PER_REQUEST``) and the body field that carries it (declared by
``_Settings``, so in every shape): the setting's name, except Cohere's ``top_n`` for ``top_k``."""


class _OwnSettings(_Body):
    """The base of ``_Settings``: refuses a body naming a setting it cannot set."""

    @model_validator(mode="before")
    @classmethod
    def _only_own_settings(cls, body: Any) -> Any:
        """Refuses a body naming a setting it cannot set (``not_own``): ignored, it ran with the server's."""
        why = not_own(body) if isinstance(body, dict) else None
        if why is not None:
            raise PydanticCustomError("server_setting", "{why}", {"why": why})
        return body


def _body_field(name: str, hint: Any) -> tuple[Any, Any]:
    """Setting ``name`` as an optional body field: its declared type or None (the server's value), bounded as its
    declaration bounds it (``Count.minimum``; ``Seconds``: finite, >= 0)."""
    check = SPECS[name].check
    bounds = ({"ge": check.minimum} if isinstance(check, Count) else
              {"ge": 0, "allow_inf_nan": False} if isinstance(check, Seconds) else {})
    return hint | None, Field(None, **bounds)


_HINTS = get_type_hints(RerankSettings)
_Settings = create_model("_Settings", __base__=_OwnSettings, __module__=__name__,
                         **{field: _body_field(name, _HINTS[name]) for name, field in BODY_FIELDS.items()})
_Settings.__doc__ = """The settings a request of any shape may carry in its body, built from their declarations
(``BODY_FIELDS``, from ``settings.PER_REQUEST`` and ``settings.SPECS``; None = the server's): ``top_n`` (the reranked
prefix, and the results returned) and ActivePRP's extensions (``budget``, ``max_rounds``, ``token_budget``,
``time_budget`` in seconds counted from the request's arrival, ``seed``, ...)."""


class RerankRequest(_Settings):
    """A Cohere rerank request (v1 and v2), with the settings of ``_Settings``.

    ``max_tokens_per_doc`` cuts each document to that many words before judging (``prompts.cut_words``: a character
    of Chinese, Japanese, Thai ... counts as one word). A document is a string or an object (Cohere v1's
    semi-structured documents): the judge reads its ``rank_fields`` (default ``["text"]``, at most
    ``MAX_RANK_FIELDS`` names), and ``return_documents`` returns it whole (``document_text``).
    """

    model: str | None = None
    query: str
    documents: list[str | dict[str, Any]]
    rank_fields: list[str] | None = Field(None, min_length=1, max_length=MAX_RANK_FIELDS)
    return_documents: Flag = False
    max_tokens_per_doc: int | None = Field(None, ge=1)

    @field_validator("model")
    @classmethod
    def _echoable_model(cls, model: str | None) -> str | None:
        """Lone surrogates become U+FFFD (``model_text``): Jina's answer echoes the model, and JSON answers cannot
        carry them."""
        return None if model is None else model_text(model)

    @field_validator("documents")
    @classmethod
    def _returnable(cls, documents: list[str | dict[str, Any]]) -> list[str | dict[str, Any]]:
        for index, document in enumerate(documents):
            if isinstance(document, dict):
                check_returnable(document, f"documents[{index}]")
        return documents


class TEIRequest(_Settings):
    """A Hugging Face text-embeddings-inference ``/rerank`` request (``truncate``/``raw_scores`` are accepted), with
    the settings of ``_Settings`` (TEI has none of those names)."""

    query: str
    texts: list[str]
    return_text: Flag = False
    truncate: Flag = False
    raw_scores: Flag = False


def document_text(index: int, document: str | dict[str, Any], rank_fields: list[str] | None = None) -> str:
    """What the judge reads of ``documents[index]``: a string as is; of an object, its ``rank_fields`` (None:
    ``["text"]``) that it has, one field's value alone, several as ``field: value`` lines in that order (values
    that are not strings as JSON).

    Raises:
        CallerError: an object with none of those fields, or a ``text`` that is not a string.
    """
    if isinstance(document, str):
        return document
    fields = [f for f in rank_fields or ["text"] if f in document]
    if not fields:
        raise CallerError(f"documents[{index}] has none of the fields {rank_fields or ['text']}: send its text as "
                          "'text', or name the fields to rank with rank_fields")
    if rank_fields is None and not isinstance(document["text"], str):
        raise CallerError(f"documents[{index}].text must be a string, got {type(document['text']).__name__}")
    values = [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in (document[f] for f in fields)]
    return values[0] if len(values) == 1 else "\n".join(f"{f}: {v}" for f, v in zip(fields, values))


MAX_INTEGER_DIGITS = 40
"""The most digits of an integer in a body (``parse_json``): a signed or unsigned 128-bit integer fits (39), so do a
64-bit ``seed`` (20) and any cap, and a document's numeric ids. Python converts a long digit string in quadratic time:
a 63 MB body of 4300-digit integers, in a field the server ignores, took 1.2 s of the event loop to parse."""


class IntegerTooLong(ValueError):
    """An integer in a body with more than ``MAX_INTEGER_DIGITS`` digits (a 400 that says so)."""


def _bounded_int(literal: str) -> int:
    digits = len(literal) - literal.startswith("-")
    if digits > MAX_INTEGER_DIGITS:
        raise IntegerTooLong(f"an integer in the body has {digits} digits, more than this server's cap of "
                             f"{MAX_INTEGER_DIGITS} digits per integer: send fewer digits (or the number as a string)")
    return int(literal)


def parse_json(body: bytes | str) -> Any:
    """``json.loads(body)``, refusing an integer of more than ``MAX_INTEGER_DIGITS`` digits before converting it
    (the C scanner hands ``parse_int`` each integer's literal). Bytes are read as UTF-8 (a BOM allowed), as RFC 8259
    requires of JSON between systems: ``json.loads`` would also take UTF-16 and UTF-32, which the docs refuse.

    Raises:
        IntegerTooLong: such an integer; UnicodeDecodeError: bytes not UTF-8; otherwise what ``json.loads`` raises.
    """
    if isinstance(body, bytes):
        body = body.decode("utf-8-sig", "surrogatepass")  # json.loads' decoding of UTF-8, without its detection
    return json.loads(body, parse_int=_bounded_int)


MAX_DOCUMENT_DEPTH = 32
"""The deepest nesting of objects and arrays in a document object, itself included (``check_returnable``)."""


def check_returnable(document: dict[str, Any], where: str) -> None:
    """Raises ValueError (a 400) when a document object cannot be returned as JSON: a NaN or infinite number
    (Python's parser takes ``NaN`` and ``Infinity``, which are not JSON), nesting deeper than
    ``MAX_DOCUMENT_DEPTH``, or two keys of an object that differ only in lone surrogates (``returned_document``
    makes them U+FFFD, so one would be lost). Checked with the body, before any judge call."""
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{where} holds {value}, which is not a JSON number: send a finite number or null")
        if isinstance(value, dict) and len({model_text(k) for k in value}) < len(value):
            raise ValueError(f"{where} has keys that differ only in lone surrogates (\\ud800-\\udfff escapes, "
                             "which an answer cannot carry): rename them")
        if isinstance(value, (dict, list)):
            if depth > MAX_DOCUMENT_DEPTH:
                raise ValueError(f"{where} is nested more than {MAX_DOCUMENT_DEPTH} levels deep: flatten it")
            stack.extend((child, depth + 1) for child in (value.values() if isinstance(value, dict) else value))


def returned_document(document: str | dict[str, Any]) -> dict[str, Any]:
    """A document as ``return_documents`` returns it: an object whole, a string as ``{"text": ...}``, lone
    surrogates replaced in every string (JSON answers cannot carry them)."""
    return _model_strings({"text": document} if isinstance(document, str) else document)


def _model_strings(value: Any) -> Any:
    if isinstance(value, str):
        return model_text(value)
    if isinstance(value, dict):
        return {model_text(k): _model_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_model_strings(v) for v in value]
    return value


class CallerError(ValueError):
    """A request the server refuses (HTTP ``status``, default 400); the message says what to change."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


CAPPED = CAPS
"""The settings a request may ask for in its body, up to the server's value: the caps (``settings.CAPS``,
``time_budget`` among them)."""
SERVER_SETTINGS: tuple[str, ...] = tuple(name for name in FIELDS if name not in PER_REQUEST)
"""The settings only the server sets (``activeprp serve``'s flags, ``create_app``'s keywords): a body naming one
is refused (``not_own``)."""


def not_own(body: dict[str, Any]) -> str | None:
    """What is wrong with a body that names a setting it cannot set, at its top level or in an ``"activeprp"``
    object (the body has none: answers have ``meta.activeprp``), else None: ``SERVER_SETTINGS``, ``top_k`` (the
    body's field is ``top_n``), any name in such an object."""
    block = body.get("activeprp")
    inner = list(block) if isinstance(block, dict) else []
    server = [name for name in SERVER_SETTINGS if name in body or name in inner]
    why = []
    if server:
        flags = ", ".join(setting_flag(name, both=True) for name in server)
        one = len(server) == 1
        why.append(f"{' and '.join(server)} {'is a setting' if one else 'are settings'} of the server, not of a "
                   f"request: start the server with {'it' if one else 'them'} (activeprp serve {flags}, or "
                   "create_app's keywords)")
    if "top_k" in body:
        why.append("top_k is named top_n in the body")
    if "activeprp" in body:
        why.append("the body has no 'activeprp' object: send a request's own settings at its top level")
    if not why:
        return None
    return "; ".join(why) + f"; a request's own settings are among {tuple(BODY_FIELDS.values())}"


VALUES_PER_DOCUMENT = 64
"""JSON values a body may hold per document of ``max_documents`` (``Limits.max_body_values``): a document object
with about 20 fields of metadata fits."""


class Limits:
    """The server's caps on a request: documents, bytes per document and per query, bytes of the whole body, and
    the most ``budget`` / ``max_rounds`` / ``token_budget`` / ``time_budget`` a request may ask for (None = no cap;
    the server's defaults are the caps)."""

    def __init__(self, max_documents: int, max_document_bytes: int, caps: dict[str, Any],
                 max_query_bytes: int | None = None, max_body_bytes: int | None = None) -> None:
        self.max_documents, self.max_document_bytes = max_documents, max_document_bytes
        self.max_query_bytes = max_query_bytes
        self.max_body_bytes = max_body_bytes or self.default_body_bytes(max_documents, max_document_bytes)
        # values, not bytes, size a parse: checked on the raw body before it is parsed (``gate.json_values``)
        self.max_body_values = VALUES_PER_DOCUMENT * max_documents + 1024
        self.caps = caps  # setting -> the server's value (None = no cap), for each of CAPPED

    @staticmethod
    def default_body_bytes(max_documents: int, max_document_bytes: int) -> int:
        """The body cap when none is given: the documents at their caps, JSON escaping included (up to 6 bytes per
        byte), plus room for the rest, at most ``MAX_BODY_BYTES``."""
        return min(6 * max_documents * max_document_bytes + 65536, MAX_BODY_BYTES)

    def own_settings(self, request: RerankRequest | TEIRequest) -> dict[str, Any]:
        """The request's own settings for ``RerankService.rerank`` (``BODY_FIELDS`` that it sends), checked against
        the server's caps.

        Raises:
            CallerError: a setting over the server's cap.
        """
        own: dict[str, Any] = {}
        for name, field in BODY_FIELDS.items():
            value = getattr(request, field)
            if value is None:
                continue
            cap = self.caps.get(name)
            if cap is not None and value > cap:
                raise CallerError(f"{field} {value} is over this server's cap of {cap}: ask for at most {cap}")
            own[name] = value
        return own

    def texts(self, query: str, documents: list[Any], rank_fields: list[str] | None = None,
              field: str = "documents") -> tuple[str, list[str]]:
        """The query and document texts (``document_text``), checked against the caps, lone surrogates replaced
        (JSON answers cannot carry them). ``field``: the body field that sent the documents (TEI's ``texts``),
        named in the errors.

        Raises:
            CallerError: an empty query or ``field``, or one over a cap (413).
        """
        if not query.strip():
            raise CallerError("query is empty: send the question the documents are ranked for")
        if not documents:
            raise CallerError(f"{field} is empty: send at least one document")
        size = len(query.encode("utf-8", "surrogatepass"))
        if self.max_query_bytes is not None and size > self.max_query_bytes:
            raise CallerError(f"the query has {size} bytes, over this server's cap of {self.max_query_bytes} bytes: "
                              "shorten it", 413)
        if len(documents) > self.max_documents:
            raise CallerError(f"{len(documents)} {field} is over this server's cap of {self.max_documents} "
                              "per request: send fewer", 413)
        texts = []
        for i, doc in enumerate(documents):
            text = document_text(i, doc, rank_fields)
            size = len(text.encode("utf-8", "surrogatepass"))
            if size > self.max_document_bytes:
                raise CallerError(f"{field}[{i}] has {size} bytes, over this server's cap of "
                                  f"{self.max_document_bytes} bytes per document: shorten it", 413)
            texts.append(model_text(text))
        return model_text(query), texts
