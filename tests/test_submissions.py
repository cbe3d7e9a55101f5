"""The one reader of what a person submits: JSON read strictly, texts checked, every
refusal an InvalidDecisionError that names the problem."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from covonaut_es.errors import InvalidDecisionError
from covonaut_es.service import (
    MAX_TEXT_CHARS,
    Action,
    Settlement,
    json_object,
    parse_json,
    person_text,
    review_submission,
)
from covonaut_es.tools import MAX_ARGUMENTS_DEPTH

DEEPEST = MAX_ARGUMENTS_DEPTH + 1
"""The deepest nesting a submitted document may have (an object of tool arguments)."""
INT_RANGE = range(-(2**63), 2**64)
BOUNDED = settings(max_examples=150, deadline=2000)

# Valid JSON values and texts ------------------------------------------------------------

text = st.text(st.characters(exclude_categories=["Cs"]), max_size=10)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(INT_RANGE.start, INT_RANGE.stop - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | text
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(text, inner, max_size=4),
    max_leaves=12,
)


@st.composite
def rendered(draw: st.DrawFn, value: Any) -> str:
    """``value`` as JSON text, in any of the layouts a client may send."""
    return json.dumps(
        value,
        ensure_ascii=draw(st.booleans()),
        indent=draw(st.none() | st.integers(0, 2)),
        separators=draw(st.none() | st.just((",", ":"))),
        sort_keys=draw(st.booleans()),
    )


valid_texts = values.flatmap(rendered)


def deep(depth: int, core: str = "1", *, objects: bool = False) -> str:
    """``core`` inside ``depth`` arrays (or objects)."""
    if objects:
        return '{"k":' * depth + core + "}" * depth
    return "[" * depth + core + "]" * depth


# What a strict reader refuses -------------------------------------------------------------

MESSAGES = {
    "duplicate": "twice in one object",
    "constant": "which is not a JSON number",
    "huge float": "which no stored JSON number can carry",
    "huge int": "beyond the 64 bits",
    "surrogate": "lone surrogate",
    "depth": f"must nest at most {DEEPEST} deep",
}
"""Each problem, and what the refusal's message says of it."""


def escaped(key: str) -> str:
    """A JSON string of ``key`` with every character escaped: the same key, spelled
    another way."""
    units = key.encode("utf-16-be")
    codes = (int.from_bytes(units[i : i + 2], "big") for i in range(0, len(units), 2))
    return '"' + "".join(f"\\u{code:04x}" for code in codes) + '"'


@st.composite
def duplicate_keys(draw: st.DrawFn) -> str:
    """An object naming one key twice (the second time perhaps escaped), with any values."""
    key = draw(text)
    others = draw(st.dictionaries(text.filter(lambda k: k != key), values, max_size=3))
    pairs = [f"{json.dumps(k)}: {json.dumps(v)}" for k, v in others.items()]
    first, second = (json.dumps(draw(values)) for _ in range(2))
    spelling = escaped(key) if key and draw(st.booleans()) else json.dumps(key)
    pairs.insert(draw(st.integers(0, len(pairs))), f"{json.dumps(key)}: {first}")
    pairs.insert(draw(st.integers(0, len(pairs))), f"{spelling}: {second}")
    return "{" + ", ".join(pairs) + "}"


huge_floats = st.builds(
    lambda sign, mantissa, e, exponent: f"{sign}{mantissa}{e}{exponent}",
    st.sampled_from(["", "-"]),
    st.sampled_from(["1", "9.99", "0.5", "123456789"]),
    st.sampled_from(["e", "E", "e+"]),
    st.integers(400, 10**6),
)
huge_ints = st.one_of(
    st.integers(min_value=INT_RANGE.stop).map(str),
    st.integers(max_value=INT_RANGE.start - 1).map(str),
    st.integers(21, 6000).map(lambda digits: "9" * digits),
)
lone_surrogates = st.builds(
    lambda before, code, after, as_key: (
        f'{{"\\u{code:04x}{after}": 1}}' if as_key else f'"{before}\\u{code:04x}{after}"'
    ),
    text.map(lambda t: json.dumps(t)[1:-1]),
    st.integers(0xD800, 0xDFFF),
    st.sampled_from(["", "x", " ", "\\n"]),
    st.booleans(),
)
too_deep = st.builds(deep, st.integers(DEEPEST + 1, DEEPEST + 200), objects=st.booleans())

HOSTILE: dict[str, st.SearchStrategy[str]] = {
    "duplicate": duplicate_keys(),
    "constant": st.sampled_from(["NaN", "Infinity", "-Infinity"]),
    "huge float": huge_floats,
    "huge int": huge_ints,
    "surrogate": lone_surrogates,
    "depth": too_deep,
}


@st.composite
def placed(draw: st.DrawFn, piece: str, problem: str) -> str:
    """``piece`` among valid siblings, inside up to three arrays or objects (a document
    too deep gets no more than it has)."""
    levels = 0 if problem == "depth" else draw(st.integers(0, 3))
    for _ in range(levels):
        siblings = [json.dumps(v) for v in draw(st.lists(values, max_size=3))]
        siblings.insert(draw(st.integers(0, len(siblings))), piece)
        if draw(st.booleans()):
            piece = "[" + ", ".join(siblings) + "]"
        else:
            keys = draw(st.lists(text, min_size=len(siblings), max_size=len(siblings), unique=True))
            pairs = (f"{json.dumps(k)}: {v}" for k, v in zip(keys, siblings, strict=True))
            piece = "{" + ", ".join(pairs) + "}"
    return piece


hostile_texts = st.sampled_from(sorted(HOSTILE)).flatmap(
    lambda problem: (
        HOSTILE[problem]
        .flatmap(lambda piece: placed(piece, problem))
        .map(lambda document: (problem, document))
    )
)


def refusal(text: str | bytes, what: str = "the edited arguments") -> str:
    """The message parse_json refuses ``text`` with (it must refuse it)."""
    with pytest.raises(InvalidDecisionError) as refused:
        parse_json(text, what)
    message = str(refused.value)
    assert message.startswith(what), message
    return message


def clean(value: Any, depth: int = 0) -> None:
    """Assert that ``value`` holds nothing a strict reader refuses."""
    if isinstance(value, dict | list):
        assert depth < DEEPEST
        for item in value.values() if isinstance(value, dict) else value:
            clean(item, depth + 1)
        if isinstance(value, dict):
            for key in value:
                key.encode("utf-8")
    elif isinstance(value, float):
        assert math.isfinite(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        assert value in INT_RANGE
    elif isinstance(value, str):
        value.encode("utf-8")


def no_repeated_key(text: str) -> None:
    """Assert that no object of the JSON ``text`` names a key twice."""

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        assert len({k for k, _ in items}) == len(items)
        return dict(items)

    json.loads(text, object_pairs_hook=pairs)


# Properties -------------------------------------------------------------------------------


@BOUNDED
@given(document=valid_texts)
def test_a_valid_document_reads_as_the_standard_parser_reads_it(document: str) -> None:
    """Valid JSON within the limits, in any layout, text or UTF-8 bytes, reads as
    json.loads reads it, and holds nothing a strict reader refuses."""
    parsed = parse_json(document, "the edited arguments")
    assert parsed == json.loads(document)
    assert parse_json(document.encode(), "the edited arguments") == parsed
    clean(parsed)
    no_repeated_key(document)


@BOUNDED
@given(problem_and_document=hostile_texts)
def test_a_document_with_one_problem_is_refused_naming_it(
    problem_and_document: tuple[str, str],
) -> None:
    """A document with a repeated key at any depth, NaN or Infinity, a number that
    overflows, an integer beyond 64 bits, a lone surrogate escape or a nesting past the
    limit is refused with InvalidDecisionError, whose message names that problem."""
    problem, document = problem_and_document
    assert MESSAGES[problem] in refusal(document)
    with pytest.raises(InvalidDecisionError):
        json_object(document, "the edited arguments")


@BOUNDED
@given(
    pieces=st.lists(
        st.sampled_from(sorted(HOSTILE)).flatmap(lambda p: HOSTILE[p].map(lambda d: (p, d))),
        min_size=2,
        max_size=4,
    ),
    valid=st.lists(values.map(json.dumps), max_size=3),
)
def test_a_document_with_several_problems_is_refused_naming_one(
    pieces: list[tuple[str, str]], valid: list[str]
) -> None:
    """Problems together are refused too; the message names one of them."""
    document = "[" + ", ".join([d for _, d in pieces] + valid) + "]"
    message = refusal(document)
    assert any(MESSAGES[problem] in message for problem, _ in pieces), message


@BOUNDED
@given(
    document=st.one_of(valid_texts, hostile_texts.map(lambda pd: pd[1])),
    cut=st.integers(1, 50),
)
def test_whatever_text_arrives_it_is_read_or_refused_never_raised_otherwise(
    document: str, cut: int
) -> None:
    """A document cut short, or any text at all: parse_json returns what json.loads
    gives, or raises InvalidDecisionError; nothing else escapes."""
    for candidate in (document, document[:-cut], document[cut:]):
        try:
            parsed = parse_json(candidate, "the edited arguments")
        except InvalidDecisionError as exc:
            assert str(exc).startswith("the edited arguments")
        else:
            assert parsed == json.loads(candidate)
            clean(parsed)


# The limits, at their edges -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (str(2**64 - 1), 2**64 - 1),
        (str(-(2**63)), -(2**63)),
        ("1e308", 1e308),
        ("-0", 0),
        ('"\\ud83d\\ude00"', "\U0001f600"),
        (deep(DEEPEST), json.loads(deep(DEEPEST))),
        (deep(DEEPEST, objects=True), json.loads(deep(DEEPEST, objects=True))),
        ('["[[[[", "{{{{"]', ["[[[[", "{{{{"]),
    ],
)
def test_values_at_the_edges_of_the_limits_are_read(document: str, expected: Any) -> None:
    """The largest integers, the largest finite float, a surrogate pair, a document
    exactly as deep as allowed and brackets inside strings are all read."""
    assert parse_json(document, "x") == expected


@pytest.mark.parametrize(
    ("document", "named"),
    [
        (str(2**64), "integer 18446744073709551616"),
        (str(-(2**63) - 1), "integer -9223372036854775809"),
        ("1e309", "number 1e309"),
        ("9" * 5000, "beyond the 64 bits"),
        (deep(DEEPEST + 1), f"not {DEEPEST + 1}"),
        ('{"a": 1, "\\u0061": 2}', "key 'a' twice"),
        ('[{"b": {"c": [{"d": 1, "d": 1}]}}]', "key 'd' twice"),
        ("[1, 2", "must be JSON"),
        ("", "must be JSON"),
    ],
)
def test_values_past_the_limits_are_refused_saying_which(document: str, named: str) -> None:
    """One past each limit is refused, the message naming the value or the key; a
    5000-digit integer is refused as too large, not as text Python cannot convert."""
    assert named in refusal(document)


def test_text_that_is_not_utf8_is_refused() -> None:
    """Bytes that are not UTF-8 are refused as such."""
    assert "must be UTF-8 text" in refusal(b'{"a": "\xff"}')


@pytest.mark.parametrize(
    ("arguments", "named"),
    [
        ("[1, 2]", "must be one JSON object, got a JSON array"),
        ('"text"', "got a JSON string"),
        ("null", "got a JSON null"),
        ("7", "got a JSON number"),
        ({"amount": float("nan")}, "must hold JSON values only"),
        ({"amount": object()}, "must hold JSON values only"),
        ({"amount": 2**64}, "beyond the 64 bits"),
        ({"note": "\ud800"}, "lone surrogate"),
        ({1: "one"}, "keys must be text"),
        ({"a": {None: "none"}}, "keys must be text"),
    ],
)
def test_edited_arguments_must_be_one_plain_json_object(arguments: Any, named: str) -> None:
    """Edited arguments are one JSON object: text of another JSON value is refused, and
    a mapping must hold plain JSON (no NaN, objects, huge integers, lone surrogates, or
    keys other than text, which JSON would turn into text nobody typed)."""
    with pytest.raises(InvalidDecisionError, match="the edited arguments") as refused:
        json_object(arguments, "the edited arguments")
    assert named in str(refused.value)


@BOUNDED
@given(arguments=st.dictionaries(text, values, max_size=5))
def test_a_mapping_of_plain_json_is_read_as_its_text_would_be(arguments: dict[str, Any]) -> None:
    """A mapping of plain JSON reads as the same object sent as JSON text."""
    assert json_object(arguments, "x") == arguments == json_object(json.dumps(arguments), "x")


# What a reviewer submits ------------------------------------------------------------------

BLANKS = ["", " ", "\n\t ", "\u3000"]


@pytest.mark.parametrize("blank", BLANKS)
@pytest.mark.parametrize(("action", "field"), [("reject", "reason"), ("respond", "answer")])
def test_a_rejection_or_response_without_text_is_refused(
    action: str, field: str, blank: str
) -> None:
    """A rejection needs a reason and a response an answer: blank text is refused,
    naming the field; an approval may have no comment."""
    with pytest.raises(InvalidDecisionError, match=f"the {field} must not be empty"):
        review_submission(action, text=blank)
    assert review_submission("approve", text=blank).text == blank


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: review_submission("approved"), "unknown decision 'approved'"),
        (lambda: review_submission("APPROVE"), "unknown decision"),
        (lambda: review_submission("reject", text=None), "the reason must be text, got NoneType"),
        (lambda: review_submission("respond", text=b"yes"), "the answer must be text, got bytes"),
        (lambda: review_submission("approve", text=["ok"]), "the comment must be text, got list"),
        (lambda: review_submission("reject", text="x" * (MAX_TEXT_CHARS + 1)), "10001 characters"),
        (
            lambda: review_submission("reject", text="no \udc80"),
            "the reason holds a lone surrogate",
        ),
        (lambda: review_submission("reject", text="no", arguments="{}"), "only an approval"),
        (lambda: review_submission("respond", text="a", arguments={}), "only an approval"),
        (lambda: review_submission("approve", digest=7), "the digest must be text, got int"),
        (lambda: review_submission("approve", arguments='{"a": NaN}'), "holds NaN"),
        (lambda: review_submission("approve", arguments="[]"), "got a JSON array"),
    ],
)
def test_a_submission_that_does_not_check_is_refused_naming_why(
    call: Callable[[], Any], named: str
) -> None:
    """An unknown action, text of the wrong type, too long or not valid text, arguments
    with anything but an approval, a digest that is not text, arguments that do not read
    strictly: each is refused with a message naming the field and the problem."""
    with pytest.raises(InvalidDecisionError) as refused:
        call()
    assert named in str(refused.value)


def test_a_submission_that_checks_is_what_was_submitted() -> None:
    """Each action keeps its text, an approval its parsed arguments and digest."""
    approval = review_submission(
        Action.APPROVE, text="ok", arguments='{"amount": 20}', digest="abc"
    )
    assert (approval.action, approval.text, approval.arguments, approval.digest) == (
        Action.APPROVE,
        "ok",
        {"amount": 20},
        "abc",
    )
    assert review_submission("reject", text="x" * MAX_TEXT_CHARS).text == "x" * MAX_TEXT_CHARS
    assert review_submission("respond", text="Paid by hand.").arguments is None


@pytest.mark.parametrize(
    ("value", "required", "named"),
    [
        (None, False, "the note must be text, got NoneType"),
        (3, False, "the note must be text, got int"),
        ("x" * (MAX_TEXT_CHARS + 1), False, "more than the 10000 allowed"),
        ("\ud800", False, "lone surrogate"),
        ("", True, "the note must not be empty"),
        (" \n", True, "the note must not be empty"),
    ],
)
def test_person_text_is_refused_naming_the_field(value: Any, required: bool, named: str) -> None:
    """person_text refuses what is no text, too long, not valid text, or blank where
    required, and names the field it checks."""
    with pytest.raises(InvalidDecisionError) as refused:
        person_text(value, "note", required=required)
    assert named in str(refused.value)


@BOUNDED
@given(value=text)
def test_person_text_keeps_valid_text_as_it_is(value: str) -> None:
    """Valid text within the limit is returned unchanged, blank too where not required."""
    assert person_text(value, "comment") == value


def test_a_settlement_checks_its_text() -> None:
    """A call that ran needs its result; a note on a call that did not run is optional;
    both are checked as any text a person submits."""
    with pytest.raises(InvalidDecisionError, match="the result must not be empty"):
        Settlement.ran_with("  ")
    with pytest.raises(InvalidDecisionError, match="the result must be text, got dict"):
        Settlement.ran_with({"paid": 5})
    with pytest.raises(InvalidDecisionError, match="the note must be text"):
        Settlement.not_run(None)
    assert Settlement.ran_with("paid 5") == Settlement(True, "paid 5")
    assert Settlement.not_run("bank says no").content == "Not executed: bank says no"
    assert Settlement.not_run().content.startswith("Not executed: a person checked")
