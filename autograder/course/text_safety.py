"""Text a learner's code chose, made safe for each place the grader shows it: one policy per place.

A learner's code chooses much of what the grader shows: an exception's message, what its process
said, a file or folder name, the values a check found. Each place has its own rules, each a named
`Policy` here (and nowhere else):

- `console_line`: a line on the instructor's terminal or in the log: the characters a terminal
  acts on (controls but tab, line and paragraph separators, bidi overrides) written as escapes,
  cut at a limit;
- `report_line`: a line of the judge's report that quotes a learner's values: every character
  that breaks, hides or disguises a line (controls, ANSI, bidi, zero-width and other
  non-printing characters, compatibility forms such as fullwidth brackets) written as its
  escape, and the judge's marks ([PASS], "3 of 3 points") quoted with a backslash;
- `learner_text`: the learner's own words inside a report line: ASCII only (backslashes doubled),
  `]` escaped so that the mark cannot be closed early, the judge's marks quoted, cut, marked
  `[learner's text: ...]`; `learner_name` a name the learner chose (as it is when it is a plain
  dotted identifier);
- `page_text`: an error's text on a page: the characters that break, hide or reorder a line
  written as escapes (it could otherwise draw what looks like the judge's lines).

`JUDGE_MARKS` finds what opens the judge's report lines; `reads_like_the_report` says whether text
could pass for one to the eye (lookalike letters, ANSI and invisible characters folded first).
Every policy takes time linear in what it keeps of the text.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass

#: What opens a line of the judge's own report: an item's mark, a cell's points line.
#: Bounded, and a number starts only where no digit or dot precedes it: one try per run of digits,
#: so searching is linear (a line of 40,000 digits once took 27 s of the grader's time).
JUDGE_MARKS = re.compile(
    r"\[\s{0,10}(?:PASS|FAIL)\s{0,10}\]|(?<![\d.])\d[\d.]{0,30}\s{1,10}of\s{1,10}\d[\d.]{0,30}\s{1,10}points",
    re.IGNORECASE,
)
#: The same, not yet quoted (a report line quotes what learner_text has not quoted already).
UNQUOTED_MARKS = re.compile(r"(?<!\\)(?:" + JUDGE_MARKS.pattern + ")", re.IGNORECASE)
#: The longest mark JUDGE_MARKS finds: a text cut for a limit keeps this much more to look in.
LONGEST_MARK = 128


def escape(ch: str) -> str:
    """A character as Python writes it in a string: `\\x1b`, `\\u2028`."""
    return ch.encode("unicode_escape").decode("ascii")


@dataclass(frozen=True)
class Policy:
    """How text is made safe for one place: how each character is written there, which of the
    judge's marks get a backslash (None: none), the most characters kept (the rest written
    "..."; None: all) and the frame that marks the text as the learner's (empty text stays
    empty)."""

    name: str
    written: Callable[[str], str]
    marks: re.Pattern | None = None
    limit: int | None = None
    frame: str = "{}"

    def __call__(self, text, limit: int | None = None) -> str:
        text, limit = str(text), limit or self.limit
        if not text:
            return ""
        if limit is not None:  # each character is written as one or more: no more than these can show
            text = text[: limit + LONGEST_MARK]
        marks = {match.start() for match in self.marks.finditer(text)} if self.marks is not None else set()
        safe = "".join(("\\" if index in marks else "") + self.written(ch) for index, ch in enumerate(text))
        if limit is not None and len(safe) > limit:
            safe = safe[:limit].rstrip("\\") + "..."  # never a cut escape's lone backslash
        return self.frame.format(safe)


#: Characters a terminal acts on (all controls but tab, line breaks among them, bidi overrides).
_TERMINAL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: Characters that break, hide or reorder a line on a page.
_LINE_BREAKERS = re.compile("[\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029\u202a-\u202e\u2066-\u2069]")


console_line = Policy("console line", lambda ch: escape(ch) if _TERMINAL.match(ch) else ch, limit=300)
report_line = Policy(
    "report line",
    lambda ch: ch if ch.isprintable() and unicodedata.normalize("NFKC", ch) == ch else escape(ch),
    marks=UNQUOTED_MARKS,
)
learner_text = Policy(
    "learner's text",
    lambda ch: "\\]" if ch == "]" else ch if " " <= ch <= "~" and ch != "\\" else escape(ch),
    marks=JUDGE_MARKS,
    limit=600,
    frame="[learner's text: {}]",
)
page_text = Policy("page text", lambda ch: escape(ch) if _LINE_BREAKERS.match(ch) else ch)

#: A name the learner's code chose that is shown as it is: a plain (dotted) identifier.
PLAIN_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,199}")


def learner_name(name) -> str:
    """A class or object name the learner's code chose: as it is when it is a plain (dotted)
    identifier, else escaped and marked as their text."""
    name = str(name)
    return name if PLAIN_NAME.fullmatch(name) else learner_text(name, 200)


# ---------------------------------------------------------------------------------------
# Text that reads like the judge's report, to the eye
# ---------------------------------------------------------------------------------------
#: ANSI escape sequences (a terminal's colours: they split a word on the page and show nothing).
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-_])")
#: Letters of other scripts drawn like the Latin ones of PASS, FAIL, of, points (UTS #39's
#: confusables for these letters), folded before the report's marks are looked for.
_LOOKALIKES = str.maketrans(
    "АВЕІКМНОРСТХЅаеіјорсхѕԁɑΑΒΕΙΚΜΝΟΡΤΥΧορνΡΑՏ",
    "ABEIKMHOPCTXSaeijopcxsdaABEIKMNOPTYXopvPAS",
)


def as_the_eye_reads(text: str) -> str:
    """text as the eye reads it: compatibility forms folded, lookalike letters made Latin, no
    ANSI sequence, no invisible character (format, combining, or a blank drawn as a space)."""
    text = unicodedata.normalize("NFKC", ANSI.sub("", text)).translate(_LOOKALIKES)
    kept = []
    for ch in text:
        category = unicodedata.category(ch)
        if category in ("Cf", "Mn", "Me", "Cc") and ch not in "\n\t":
            continue
        kept.append(" " if category == "Zs" or ch in "\u2800\u3164\uffa0\u115f\u1160" else ch)
    return "".join(kept)


def reads_like_the_report(text: str) -> bool:
    """Whether text could pass for a line of the judge's report ([PASS], "3 of 3 points")."""
    return bool(JUDGE_MARKS.search(as_the_eye_reads(text)))


#: What makes a spreadsheet read a cell as a formula (OWASP's list: `=`, `+`, `-`, `@`, tab, CR).
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(text: str) -> str:
    """A text cell of a CSV file an instructor opens in a spreadsheet: one that a spreadsheet would
    read as a formula (a learner's file name `=HYPERLINK(...).ipynb`) gets a leading `'`, which
    spreadsheets show as text; a number stays a number."""
    if len(text) < 2 or not text.startswith(_FORMULA_START):  # a lone "-" is a table's dash
        return text
    try:
        float(text)
    except ValueError:
        return "'" + text
    return text
