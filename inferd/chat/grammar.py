"""Constrained decoding: a JSON schema, regex, Lark or GBNF grammar becomes, at
each step, the set of tokens the model may sample next.

Built on llguidance: it compiles JSON Schema, regex, Lark and GBNF (through
`gbnf_to_lark`) lazily, with no per-schema precompute over the vocabulary, so a
new schema costs about a millisecond, and its core is small and torch-free.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, TypeVar

import llguidance
import torch
from llguidance.gbnf_to_lark import gbnf_to_lark

from inferd.chat.grammar_cache import BoundedLruCache
from inferd.chat.repetition_limits import (
    lark_repetition_problem,
    regex_repetition_problem,
    schema_repetition_problem,
)

if TYPE_CHECKING:
    from inferd.models.tokenizer import Tokenizer

__all__ = [
    "CompiledGrammar",
    "GrammarCompiler",
    "GrammarError",
    "GrammarSetupError",
    "GrammarSpec",
    "TokenConstraint",
]

GrammarKind = Literal["json_object", "json_schema", "regex", "gbnf", "lark"]
_KIND_NAMES: dict[str, str] = {
    "json_object": "JSON object",
    "json_schema": "JSON schema",
    "regex": "regex",
    "gbnf": "GBNF grammar",
    "lark": "Lark grammar",
}

# Overrides rather than defaults, so a schema's own "x-guidance" cannot undo them.
# Separators are fixed to json.dumps' ", " and ": ": the output stays short and
# parseable, and a model cannot spend its tokens on runs of whitespace.
# Not lenient: a keyword llguidance cannot enforce (uniqueItems, not, if/then,
# an unknown format) is an error naming it, rather than output that silently
# fails the client's own validation.
_JSON_OPTIONS = {
    "whitespace_flexible": False,
    "whitespace_pattern": None,
    "item_separator": ", ",
    "key_separator": ": ",
    "lenient": False,
}

_PARSER_LIMITS = llguidance.LLParserLimits(
    # Errors go back to API clients: the message, not a dump of parser state.
    verbose_errors=False,
    # The lexer's states are shared by every request on one compiled grammar and
    # live as long as its cache entry: at ~0.4-2 kB a state this keeps a grammar
    # under ~10-40 MB (the default, 250k, allows ~0.1-0.5 GB). Typical schemas use
    # 100-200 states; a bounded string uses about one per character written.
    max_lexer_states=20_000,
    # llguidance's defaults, written out because they bound each step's time
    # (~14 ms of lexer work, ~2.5 ms of parser items) and the grammar's size.
    step_lexer_fuel=200_000,
    initial_lexer_fuel=1_000_000,
    step_max_items=50_000,
    max_items_in_row=2_000,
    max_grammar_size=500_000,
)

# The JSON compiler's time grows with the square of one object's property count
# (4000 optional properties take ~1 s); 1000 keeps any one object near 0.1 s.
MAX_PROPERTIES_PER_OBJECT = 1000

# llguidance compiles recursively: a chain of a few thousand rules or $refs, well
# inside the source limit, overflows an 8 MB thread stack and kills the process.
# This is address space, touched only as deep as a grammar goes; 64 MiB already
# held the deepest sources that fit the default source limit.
_COMPILE_STACK_BYTES = 256 << 20

_MAX_MESSAGE_CHARS = 1000


class GrammarError(ValueError):
    """An invalid or unsupported schema, regex or grammar (the client should change it)."""


class GrammarSetupError(RuntimeError):
    """The model's tokenizer cannot drive constrained decoding."""


@dataclass(frozen=True)
class GrammarSpec:
    """What the output must follow. `source` is the schema as JSON text
    (json_schema), the regex, or the GBNF or Lark text; "" for json_object."""

    kind: GrammarKind
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KIND_NAMES:
            raise GrammarError(f"unknown grammar kind {self.kind!r}; use one of {', '.join(_KIND_NAMES)}")
        if not isinstance(self.source, str):
            raise GrammarError(f"a grammar source must be text, not {type(self.source).__name__}")
        if self.kind == "json_object" and self.source:
            raise GrammarError("a json_object grammar takes no source; send a json_schema to constrain the object")

    @staticmethod
    def json_schema(schema: dict) -> GrammarSpec:
        """Compact JSON text of `schema`, so equal schemas share a cache entry.

        Keys keep their order rather than being sorted: llguidance emits object
        properties in schema order and applies allOf/anyOf/properties in the order
        they appear, so sorting would change what the model is made to write."""
        if not isinstance(schema, dict):
            raise GrammarError(f"a JSON schema must be a JSON object, not {type(schema).__name__}")
        try:
            text = json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
        except RecursionError:
            raise GrammarError("the JSON schema is nested too deeply; flatten it or use $defs and $ref") from None
        except (TypeError, ValueError) as error:
            raise GrammarError(f"the JSON schema is not valid JSON: {error}") from None
        return GrammarSpec("json_schema", text)


@dataclass(frozen=True, eq=False)
class CompiledGrammar:
    """A grammar ready to drive requests; each request matches on its own copy."""

    spec: GrammarSpec
    prototype: llguidance.LLMatcher

    def new_matcher(self) -> llguidance.LLMatcher:
        # Copies share the compiled grammar and the lexer's states; this costs microseconds.
        return self.prototype.deep_copy()


class TokenConstraint:
    """One request's position in its grammar; the engine drives it as a
    `GrammarConstraint` (inferd.engine.sampling.grammar_mask)."""

    def __init__(
        self,
        matcher: llguidance.LLMatcher,
        eos_token_ids: frozenset[int],
        vocab_size: int,
        on_limit: Callable[[], None] | None = None,
    ):
        """`vocab_size` is llguidance's: the larger of the tokenizer's and the logits'.
        `on_limit` runs once if matching hits a resource limit."""
        self._matcher = matcher
        self._eos_token_ids = eos_token_ids
        self._vocab_size = vocab_size
        self._mask_words = (vocab_size + 31) // 32
        self._on_limit = on_limit

    def fill_mask(self, bitmask: torch.Tensor, row: int) -> None:
        """Write the tokens allowed next into row `row` of a bitmask from grammar_mask.allocate_bitmask.
        When the grammar is complete, or failed a resource limit, only EOS is allowed."""
        _check_bitmask(bitmask)
        if not 0 <= row < bitmask.shape[0]:
            raise IndexError(f"row {row} is outside the bitmask's {bitmask.shape[0]} rows")
        target = bitmask[row]
        if target.shape[0] == self._mask_words:
            self._matcher.unsafe_compute_mask_ptr(target.data_ptr(), self._mask_words * 4)
        else:
            # The logits are narrower or wider than the tokenizer: tokens beyond either are never allowed.
            scratch = torch.empty(self._mask_words, dtype=torch.int32)
            self._matcher.unsafe_compute_mask_ptr(scratch.data_ptr(), self._mask_words * 4)
            shared = min(self._mask_words, target.shape[0])
            target[:shared] = scratch[:shared]
            target[shared:] = 0
        self._report_limit()

    def accept(self, token_id: int) -> None:
        """Advance past a sampled token, which must have been allowed by the last mask."""
        stopped = self._matcher.is_stopped()
        if stopped and token_id in self._eos_token_ids:
            return  # the mask allowed only EOS; nothing is left to match
        # A limit hit while checking is not the token's fault: matching ends, `error` says why.
        if stopped or not 0 <= token_id < self._vocab_size or (
            self._matcher.validate_tokens([token_id]) != 1 and not self._matcher.is_error()
        ):
            detail = _clean_message(self._matcher.get_error())
            raise GrammarError(
                f"token {token_id} is not allowed by the grammar here; sample from the masked logits"
                + (f" ({detail})" if detail else "")
            )
        # An allowed token fails only on a resource limit (too many lexer states);
        # the matcher then stops, so `finished` ends the output and `error` says why.
        self._matcher.consume_token(token_id)
        self._report_limit()

    def _report_limit(self) -> None:
        if self._on_limit is not None and self._matcher.is_error():
            on_limit, self._on_limit = self._on_limit, None
            on_limit()

    @property
    def finished(self) -> bool:
        """The grammar is complete (or failed): only EOS is allowed now."""
        return self._matcher.is_stopped()

    @property
    def accepting(self) -> bool:
        """The output so far is a complete match, so EOS is allowed."""
        return self._matcher.is_accepting()

    @property
    def error(self) -> str | None:
        """Why matching stopped early (a resource limit hit mid-generation), if it did."""
        return _clean_message(self._matcher.get_error()) or None


class GrammarCompiler:
    """Compiles grammar specs for one model's tokenizer and caches the results."""

    def __init__(
        self,
        tokenizer: Tokenizer,
        vocab_size: int,
        max_cache_entries: int = 256,
        *,
        max_cache_bytes: int = 16 << 20,
        max_source_bytes: int = 256 << 10,
    ):
        """`vocab_size` is the model's logits width, which may exceed the tokenizer's.
        The cache holds at most `max_cache_entries` grammars whose sources total at
        most `max_cache_bytes`; a source over `max_source_bytes` is refused."""
        if vocab_size < 1:
            raise ValueError(f"vocab_size must be positive, got {vocab_size}")
        self.vocab_size = vocab_size
        self.max_source_bytes = max_source_bytes
        eos_token_ids = _end_of_sequence_ids(tokenizer)
        self._eos_token_ids = frozenset(eos_token_ids)
        self._llguidance_vocab = max(vocab_size, tokenizer.vocab_size)
        # Built on first use: for a 262k vocabulary it takes seconds and a
        # quarter gigabyte that servers never asked for structured output need not pay.
        self._build_tokenizer = lambda: _llguidance_tokenizer(tokenizer, self._llguidance_vocab, eos_token_ids)
        self._tokenizer_value = None
        self._tokenizer_lock = threading.Lock()
        self.cache: BoundedLruCache[GrammarSpec, CompiledGrammar] = BoundedLruCache(max_cache_entries, max_cache_bytes)

    @property
    def _tokenizer(self):
        with self._tokenizer_lock:
            if self._tokenizer_value is None:
                self._tokenizer_value = self._build_tokenizer()
            return self._tokenizer_value

    @property
    def eos_token_ids(self) -> frozenset[int]:
        """The tokens allowed once a grammar is complete."""
        return self._eos_token_ids

    def validate(self, spec: GrammarSpec) -> None:
        """Raise GrammarError unless `spec` compiles (the result is cached for the request)."""
        self.compile(spec)

    def constraint(self, spec: GrammarSpec) -> TokenConstraint:
        """A fresh matcher for one request, at the start of the grammar."""
        compiled = self.compile(spec)
        # The lexer that hit a limit is shared by every copy: drop it so later requests start afresh.
        return TokenConstraint(
            compiled.new_matcher(), self._eos_token_ids, self._llguidance_vocab,
            on_limit=lambda: self.cache.discard(spec, compiled),
        )

    def compile(self, spec: GrammarSpec) -> CompiledGrammar:
        cached = self.cache.get(spec)
        if cached is not None:
            return cached
        try:
            source_bytes = len(spec.source.encode("utf-8"))
        except UnicodeEncodeError:
            raise GrammarError(
                f"the {_KIND_NAMES[spec.kind]} contains an unpaired UTF-16 surrogate; send valid Unicode"
            ) from None
        if source_bytes > self.max_source_bytes:
            raise GrammarError(
                f"the {_KIND_NAMES[spec.kind]} is {source_bytes} bytes; the limit is {self.max_source_bytes}; "
                "send a smaller one"
            )
        compiled = _call_on_deep_stack(lambda: self._compile_uncached(spec))
        self.cache.put(spec, compiled, source_bytes)
        return compiled

    def _compile_uncached(self, spec: GrammarSpec) -> CompiledGrammar:
        grammar = _llguidance_grammar(spec)
        matcher = llguidance.LLMatcher(self._tokenizer, grammar, log_level=0, limits=_PARSER_LIMITS)
        if matcher.is_error():
            message = _clean_message(matcher.get_error())
            raise GrammarError(f"invalid or unsupported {_KIND_NAMES[spec.kind]}: {message}")
        # A grammar that only recurses ({"$ref": "#"}, root ::= root) compiles, then
        # allows nothing: its first mask, on a copy, says so before any request runs.
        probe = matcher.deep_copy()
        probe.compute_bitmask()
        if probe.is_error():
            raise GrammarError(f"the {_KIND_NAMES[spec.kind]} can never produce any output (it only refers to "
                               f"itself, or allows no text at all): {_clean_message(probe.get_error())}")
        return CompiledGrammar(spec, matcher)


def _check_bitmask(bitmask: torch.Tensor) -> None:
    if bitmask.dtype != torch.int32 or bitmask.dim() != 2 or bitmask.device.type != "cpu":
        raise ValueError(
            f"the bitmask must be a 2-D int32 CPU tensor from grammar_mask.allocate_bitmask; "
            f"got {bitmask.dim()}-D {bitmask.dtype} on {bitmask.device}"
        )
    if not bitmask.is_contiguous():
        raise ValueError("the bitmask must be contiguous; allocate it with grammar_mask.allocate_bitmask")


def _end_of_sequence_ids(tokenizer: Tokenizer) -> list[int]:
    # Every end-of-generation token (e.g. Gemma's <end_of_turn> besides <eos>), the
    # tokenizer's EOS first: a model ends a chat turn with its own token.
    others = sorted(tokenizer.eos_token_ids - {tokenizer.eos_token_id})
    ids = ([tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []) + others
    if not ids:
        raise GrammarSetupError(
            "the model's tokenizer has no end-of-sequence token, which constrained decoding needs to end the "
            "output; set eos_token in the model's tokenizer config"
        )
    return ids


def _llguidance_tokenizer(tokenizer: Tokenizer, vocab_size: int, eos_token_ids: list[int]) -> llguidance.LLTokenizer:
    try:
        return llguidance.LLTokenizer(tokenizer.backend.serialized(), n_vocab=vocab_size, eos_token=eos_token_ids)
    except (ValueError, RuntimeError) as error:
        raise GrammarSetupError(f"llguidance cannot use this model's tokenizer: {error}") from None


def _llguidance_grammar(spec: GrammarSpec) -> str:
    """The grammar in llguidance's own serialized form."""
    if spec.kind == "json_object":
        return llguidance.LLMatcher.grammar_from_json_schema('{"type":"object"}', overrides=_JSON_OPTIONS)
    if spec.kind == "json_schema":
        _check_json_schema(_parse_json_schema(spec.source))
        try:
            return llguidance.LLMatcher.grammar_from_json_schema(spec.source, overrides=_JSON_OPTIONS)
        except ValueError as error:
            raise GrammarError(f"invalid JSON schema: {error}") from None
    if spec.kind == "regex":
        _refuse(regex_repetition_problem(spec.source))
        return llguidance.LLMatcher.grammar_from_regex(spec.source)
    lark = spec.source if spec.kind == "lark" else _gbnf_as_lark(spec.source)
    _refuse(lark_repetition_problem(lark))
    for embedded_schema in _embedded_json_schemas(lark):
        _check_json_schema(embedded_schema)
    return llguidance.LLMatcher.grammar_from_lark(lark)


def _refuse(problem: str | None) -> None:
    if problem is not None:
        raise GrammarError(problem)


def _parse_json_schema(source: str) -> object:
    try:
        schema = json.loads(source)
    except RecursionError:
        raise GrammarError("the JSON schema is nested too deeply; flatten it or use $defs and $ref") from None
    except ValueError as error:
        raise GrammarError(f"the JSON schema is not valid JSON: {error}") from None
    if not isinstance(schema, dict):
        raise GrammarError(f"a JSON schema must be a JSON object, not {type(schema).__name__}")
    return schema


def _check_json_schema(schema: object) -> None:
    _check_json_schema_size(schema)
    _refuse(schema_repetition_problem(schema))


def _check_json_schema_size(schema: object) -> None:
    """Refuse objects whose property count would make compiling slow."""
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, dict):
            names: set[str] = set()
            if isinstance(node.get("properties"), dict):
                names.update(node["properties"])
            if isinstance(node.get("required"), list):
                names.update(name for name in node["required"] if isinstance(name, str))
            if len(names) > MAX_PROPERTIES_PER_OBJECT:
                raise GrammarError(
                    f"a JSON schema object declares {len(names)} properties; at most {MAX_PROPERTIES_PER_OBJECT} "
                    "are supported in one object; split it into nested objects"
                )
            pending.extend(node.values())
        elif isinstance(node, list):
            pending.extend(node)


def _embedded_json_schemas(lark: str) -> Iterator[object]:
    """Schemas written inline in Lark as `%json {...}`."""
    decoder = json.JSONDecoder()
    for directive in re.finditer(r"%json\s*", lark):
        try:
            schema, _ = decoder.raw_decode(lark, directive.end())
        except (ValueError, RecursionError):
            continue  # llguidance reports the malformed schema itself
        yield schema


def _gbnf_as_lark(gbnf: str) -> str:
    try:
        return gbnf_to_lark(gbnf)
    except RecursionError:
        raise GrammarError("the GBNF grammar is nested too deeply; split it into named rules") from None
    except Exception as error:  # the converter raises bare Exception for undefined and missing rules
        raise GrammarError(f"invalid GBNF grammar: {error}") from None


def _clean_message(message: str) -> str:
    message = message.replace("<non-verbose/>", "").strip()
    return message if len(message) <= _MAX_MESSAGE_CHARS else message[:_MAX_MESSAGE_CHARS] + " ..."


_Result = TypeVar("_Result")
_stack_size_lock = threading.Lock()


def _call_on_deep_stack(function: Callable[[], _Result]) -> _Result:
    """Run `function` on a thread with a deep stack and return or raise what it does."""
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["value"] = function()
        except BaseException as error:  # handed to the caller's thread below
            outcome["error"] = error

    # stack_size is process-wide: set it only for as long as this thread takes to start.
    with _stack_size_lock:
        previous = threading.stack_size(_COMPILE_STACK_BYTES)
        try:
            worker = threading.Thread(target=run, name="grammar-compile", daemon=True)
            worker.start()
        finally:
            threading.stack_size(previous)
    worker.join()
    if "error" in outcome:
        raise outcome["error"]  # type: ignore[misc]
    return outcome["value"]  # type: ignore[return-value]
