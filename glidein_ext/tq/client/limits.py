"""What a Task Queue request may carry: bounds and checks, checked before anything is stored.

One home for the rules that the API's schemas (``tq.service.api.schemas``), the workflow parser
(``tq.workflow``) and the pilot agent share, so that nothing the TQ stores can stop it later: every
integer fits the database's 64-bit columns and a sane range, every text is UTF-8 without NUL, every
ClassAd expression parses and every attribute name is a plain ClassAd name, and LFNs follow one
rule (:func:`lfn_problem`; a pilot refuses a task breaking it as that task's failure).  Each check
returns why a value is refused, in a few words with the value shortened, or None.

Python 3.9 and the standard library only (the pilot agent checks LFNs on the worker node);
classad2 is imported only when an expression is checked, never on the worker node.
"""

from __future__ import annotations

import math
import re

INT64_MAX = 2**63 - 1
INT32_MAX = 2**31 - 1
MAX_NAME_CHARS = 200  # workflow, task, site and batch names (the database's columns)
MAX_TEXT_CHARS = 10_000  # a command, a string attribute, a ClassAd expression
MAX_LFN_BYTES = 1024  # the database's column
MAX_COMPONENT_BYTES = 255  # NAME_MAX of Linux file systems
MAX_ATTRIBUTE_CHARS = 100
TEN_YEARS = 10 * 365 * 24 * 3600
MAX_REPORTS = 64  # pilots' reports in one request (protocol.Reports)
MAX_OFFER_WAIT = 3600  # seconds a pilot's task request may stand as an offer (Lee 2003 §4.2.3)

# Sane ranges of the integers a task or a pilot declares, inclusive (seconds, MB, counts).
BOUNDS = {
    "cpus": (1, 1_000_000),
    "request_cpus": (1, 1_000_000),
    "memory": (0, 2**40),
    "request_memory": (0, 2**40),
    "disk": (0, 2**40),
    "request_disk": (0, 2**40),
    "max_runtime": (1, TEN_YEARS),
    "ttl": (0, TEN_YEARS),
    "priority": (0, INT32_MAX),
    "step": (0, INT32_MAX),
    "max_retries": (0, 1000),
    "task_id": (1, INT64_MAX),
    "pilot_id": (1, INT64_MAX),
    "attempt": (0, INT64_MAX),
    "exit_code": (-INT32_MAX - 1, INT32_MAX),
}

# ClassAd calls whose one call may cost a tenth of a second or more: regular expressions (PCRE,
# backtracking until its match limit) and those built on them, ``eval`` (whose text is built at run
# time: any call at all), and every function not known to run in time linear in its arguments
# (``CHEAP_CALLS``; HTCondor's ClassAd reference, "Predefined Functions").  They are counted on the
# expression's tokens (``costly_calls``), after comments and white space, and on quoted names
# (``'regexp'(...)`` is a call too), never on its text.  An expression may make at most
# MAX_COSTLY_CALLS of them; the Task Queue evaluates such expressions in a worker process within a
# time budget (``tq.service.matching.costly``), never on its event loop.
MAX_COSTLY_CALLS = 4
CHEAP_CALLS = frozenset(
    {
        "abs",
        "abstime",
        "avg",
        "bool",
        "ceiling",
        "floor",
        "identicalmember",
        "ifthenelse",
        "int",
        "interval",
        "isboolean",
        "isclassad",
        "iserror",
        "isinteger",
        "islist",
        "isreal",
        "isstring",
        "isundefined",
        "join",
        "max",
        "member",
        "min",
        "pow",
        "quantize",
        "random",
        "real",
        "reltime",
        "round",
        "size",
        "split",
        "splitslotname",
        "splitusername",
        "strcat",
        "strcmp",
        "stricmp",
        "string",
        "stringlistavg",
        "stringlistimember",
        "stringlistmax",
        "stringlistmember",
        "stringlistmin",
        "stringlistsize",
        "stringlistsum",
        "substr",
        "sum",
        "time",
        "tolower",
        "toupper",
        "versioncmp",
        "versioneq",
        "versionge",
        "versiongt",
        "versionle",
        "versionlt",
    }
)
# Words followed by "(" that are operators, not calls (``x is (y)``).
_NOT_CALLS = frozenset({"is", "isnt"})
_ATTRIBUTE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Words of the ClassAd language an attribute cannot be named (they would shadow or not parse).
_RESERVED = {"true", "false", "undefined", "error", "is", "isnt", "parent", "my", "target"}


def shorten(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters: messages never print whole values."""
    if isinstance(value, str) and len(value) > 2 * limit:
        value = value[: 2 * limit]
    elif isinstance(value, (list, dict, tuple, set)) and len(value) > limit:
        return f"<{type(value).__name__} of {len(value)} items>"
    try:
        text = repr(value)
    except RecursionError:  # a nested value from YAML or JSON
        return f"<deeply nested {type(value).__name__}>"
    return text if len(text) <= limit else f"{text[: limit - 5]}...{text[-2:]}"


def text_problem(value: object, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    """A string the database and the wire can carry: UTF-8, no NUL, at most ``max_chars``."""
    if not isinstance(value, str):
        return f"must be a string, got {shorten(value)}"
    if len(value) > max_chars:
        return f"is longer than {max_chars} characters"
    if "\x00" in value:
        return f"holds a NUL character: {shorten(value)}"
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return f"is not valid UTF-8 (a lone surrogate): {shorten(value)}"
    return None


def printable_problem(value: object, max_chars: int = MAX_TEXT_CHARS) -> str | None:
    """A text of printable characters only (``str.isprintable``): what a task's name, its command's
    words and its LFNs must be, since a pilot in a glidein puts them into a job ad, one attribute
    a line.  No line end of any kind (``\\n``, ``\\r``, VT, FF, the separators U+001C-U+001E,
    NEL U+0085, LINE and PARAGRAPH SEPARATOR U+2028/U+2029), no other control or format
    character, no tab."""
    problem = text_problem(value, max_chars)
    if problem is not None:
        return problem
    assert isinstance(value, str)
    for char in value:
        if not char.isprintable():
            shown = shorten(value)
            return f"holds the character U+{ord(char):04X}, which is not printable: {shown}"
    return None


def int_problem(value: object, name: str) -> str | None:
    """An integer (not a bool) within ``BOUNDS[name]``, else 64 bits."""
    low, high = BOUNDS.get(name, (-INT64_MAX - 1, INT64_MAX))
    if isinstance(value, bool) or not isinstance(value, int):
        return f"must be an integer, got {shorten(value)}"
    if not low <= value <= high:
        return f"must be an integer in {low}..{high}, got {shorten(value, 30)}"
    return None


def attribute_name_problem(name: object) -> str | None:
    """A plain ClassAd attribute name: letters, digits, '_', not a word of the language."""
    if not isinstance(name, str) or len(name) > MAX_ATTRIBUTE_CHARS or not _ATTRIBUTE.match(name):
        return f"attribute name {shorten(name)} is not a ClassAd name (letters, digits, '_')"
    if name.lower() in _RESERVED:
        return f"attribute name {name!r} is a reserved word of the ClassAd language"
    return None


def scalar_problem(value: object) -> str | None:
    """A literal attribute value: a bool, a 64-bit integer, a finite float or a text."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if -INT64_MAX - 1 <= value <= INT64_MAX else "is an integer beyond 64 bits"
    if isinstance(value, float):
        return None if math.isfinite(value) else f"is not a finite number: {value!r}"
    if isinstance(value, str):
        return text_problem(value)
    return f"must be a boolean, number or string, got {shorten(value)}"


def expr_problem(text: object) -> str | None:
    """A ClassAd expression that parses (Requirements, Rank), with at most ``MAX_COSTLY_CALLS``
    costly calls (``costly_calls``)."""
    problem = text_problem(text)
    if problem is not None:
        return problem
    assert isinstance(text, str)
    if not text.strip():
        return "is empty"
    count = costly_calls(text)
    if count is None:
        return f"is not a valid ClassAd expression (an unclosed string or comment): {shorten(text)}"
    if count > MAX_COSTLY_CALLS:
        return (
            f"makes more than {MAX_COSTLY_CALLS} costly calls (regexp or its kin, eval, or a "
            "function not known to be cheap)"
        )
    from glidein_ext import classads  # classad2: only where expressions are checked (the TQ)
    from glidein_ext.errors import ClassAdError

    try:
        classads.parse_expr(text)
    except ClassAdError:
        return f"is not a valid ClassAd expression: {shorten(text)}"
    return None


def _skip_quoted(text: str, pos: int, quote: str) -> int:
    """The index after the string (or quoted name) that opens at ``pos``; -1 if it is not
    closed.  A backslash escapes the character after it, as in the ClassAd lexer."""
    pos += 1
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            pos += 2
        elif char == quote:
            return pos + 1
        else:
            pos += 1
    return -1


def _called_names(text: str) -> list[str] | None:
    """The names the ClassAd expression ``text`` calls, lower-case, in order, as its tokens show
    them (the ClassAd lexer's: ``/* */`` and ``//`` comments and white space separate tokens, a
    string's contents are not tokens, a quoted name ``'...'`` is a name); a quoted name with an
    escape is "\\" (never a cheap call).  None if a string, quoted name or comment is not
    closed."""
    calls: list[str] = []
    name: str | None = None  # the name just read, if the last token was one
    pos, end = 0, len(text)
    while pos < end:
        char = text[pos]
        if char.isspace():
            pos += 1
            continue
        if text.startswith("/*", pos):
            close = text.find("*/", pos + 2)
            if close < 0:
                return None
            pos = close + 2
            continue
        if text.startswith("//", pos):
            newline = text.find("\n", pos)
            pos = end if newline < 0 else newline + 1
            continue
        if char in "\"'":
            after = _skip_quoted(text, pos, char)
            if after < 0:
                return None
            quoted = text[pos + 1 : after - 1]
            name = None if char == '"' else ("\\" if "\\" in quoted else quoted.lower())
            pos = after
            continue
        if char.isalnum() or char == "_":
            start = pos
            while pos < end and (text[pos].isalnum() or text[pos] in "_."):
                if text[pos] == "." and not text[start].isdigit():
                    break  # a selection (MY.x): the dot is a token of its own
                pos += 1
            word = text[start:pos]
            # a number is no name; a name glued to one (``1regexp``) is one, whatever it is
            name = None if word.replace(".", "").isdigit() else word.lower()
            continue
        if char == "(" and name is not None and name not in _NOT_CALLS:
            calls.append(name)
        name = None
        pos += 1
    return calls


def costly_calls(text: str) -> int | None:
    """How many costly calls the ClassAd expression ``text`` makes (every call but of
    ``CHEAP_CALLS``: regexp and its kin, eval, whatever is not known), counted on its tokens;
    None if it cannot be tokenized (an unclosed string, quoted name or comment)."""
    names = _called_names(text)
    if names is None:
        return None
    return sum(1 for name in names if name not in CHEAP_CALLS)


def is_costly(*texts: str) -> bool:
    """Whether an expression among ``texts`` makes a costly call (``costly_calls``) or cannot be
    tokenized: it is evaluated away from the Task Queue's event loop."""
    return any(costly_calls(text) != 0 for text in texts)


def lfn_problem(lfn: object) -> str | None:
    """Why ``lfn`` is not a usable LFN (absolute, plain components of at most 255 bytes, at most
    1024 bytes, no white space, control or other non-printable character, UTF-8); None if it
    is."""
    if not isinstance(lfn, str):
        return f"an LFN must be a string, got {shorten(lfn)}"
    shown = shorten(lfn)
    try:
        encoded = lfn.encode("utf-8")
    except UnicodeEncodeError:
        return f"LFN {shown} is not valid UTF-8"
    if not lfn.startswith("/"):
        return f"LFN {shown} must be absolute (start with '/')"
    if len(encoded) > MAX_LFN_BYTES:
        return f"LFN {shown} is longer than {MAX_LFN_BYTES} bytes"
    if any(ch.isspace() or not ch.isprintable() for ch in lfn):
        return f"LFN {shown} holds white space, NUL or a control character"
    for part in lfn[1:].split("/"):
        if part in {"", ".", ".."}:
            return f"LFN {shown} has an empty, '.' or '..' component"
        if len(part.encode("utf-8")) > MAX_COMPONENT_BYTES:
            return f"LFN {shown} has a component longer than {MAX_COMPONENT_BYTES} bytes"
    return None
