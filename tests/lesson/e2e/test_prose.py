"""The prose says only what the notebooks show: every number in a markdown cell of the stages and of
their *Going deeper* companions is printed by a code cell of the executed solutions, or is a cited
constant listed below; and each stage's map (prerequisites, points, what to compare with) agrees
with the notebooks themselves. The maps' minutes are held to the time model in
tests/lesson/unit/test_time_model.py.
"""

from __future__ import annotations

import math
import re

import nbformat
import pytest

from autograder.adapters.lesson import NOTEBOOKS, SHIPPED_FILES
from autograder.course.paths import DATA, SOLUTIONS
from bundle import companions

#: Numbers the prose may state without a code cell printing them, each with where it comes from.
CITED = {
    "2016": "Chen, Xu, Zhang, Guestrin, Training Deep Nets with Sublinear Memory Cost, 2016",
    "1604.06174": "the arXiv identifier of that paper",
    "2000": "Griewank and Walther, Algorithm 799: revolve, ACM Transactions on Mathematical Software, 2000",
    "22244": "jax-ml/jax pull request 22244, cited in remat_partial_eval (jax/_src/ad_checkpoint.py, JAX 0.9.2)",
    "18954": "jax-ml/jax issue 18954: memory_analysis() reporting all zeros on GPU",
    "0.4.20": "the JAX version jax-ml/jax issue 18954 was reported with",
    "2023": "the year jax-ml/jax issue 18954 was reported",
    "0.11.0": "the JAX version whose print_saved_residuals looks through reduce_precision (its source)",
}
#: The heading of the map cell at the top of each stage; its numbers are checked by the map tests below.
MAP_HEADING = "## Your map"
#: A Going deeper companion's time, in its first cell: the time model's, checked there
#: (tests/lesson/unit/test_time_model.py), as a map's minutes are.
COMPANION_TIME = re.compile(r"\*\*Time:\*\*\s+about\s+\d+\s+minutes")

#: A number as prose writes it: 256, 1.83 (in 1.83x), 1e-6, −0.5, 0.9.2. Digits that belong to a
#: word (float32, v1, 2v, W_l) are not numbers of the prose.
NUMBER = re.compile(r"(?<![\w.^])[-−]?\d+(?:\.\d+)*(?:e[-+−]?\d+)?(?=[x×]?(?!\w))")
PRINTED = re.compile(r"[-−]?\d+(?:\.\d+)*(?:e[-+]?\d+)?")


def prose_of(markdown: str) -> str:
    """What a markdown cell says in words: no code spans or blocks, no math, no HTML tags, no list
    markers."""
    text = re.sub(r"```.*?```", " ", markdown, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$|\$[^$\n]+\$", " ", text, flags=re.S)
    text = re.sub(r"`[^`\n]*`", " ", text)
    text = re.sub(r"<[^>\n]+>", " ", text)
    text = re.sub(r"^\s*(\d+\.|[-*])\s", " ", text, flags=re.M)
    return text


def prose_numbers(markdown: str) -> list[str]:
    return [n.replace("−", "-") for n in NUMBER.findall(prose_of(markdown))]


def printed_numbers(notebook) -> set[str]:
    numbers = set()
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            text = (
                output.get("text", "")
                if output.get("output_type") == "stream"
                else output.get("data", {}).get("text/plain", "")
            )
            numbers |= {n.replace("−", "-") for n in PRINTED.findall(text)}
    return numbers


def _decimals(number: str) -> int | None:
    if "e" in number or number.count(".") > 1:
        return None
    return len(number.split(".")[1]) if "." in number else 0


def shown(number: str, printed: set[str]) -> bool:
    """A prose number is shown when a printed number is the same, or rounds to it."""
    if number in printed:
        return True
    try:
        value = float(number)
    except ValueError:  # a version such as 0.9.2: only its exact text counts
        return False
    places = _decimals(number)
    for candidate in printed:
        try:
            found = float(candidate)
        except ValueError:
            continue
        if math.isclose(found, value, rel_tol=1e-12, abs_tol=0.0):
            return True
        if places is not None and places > 0 and round(found, places) == value:
            return True
    return False


def unshown_numbers(solution_notebooks: dict, executed: dict) -> list[str]:
    """'<notebook> cell <i>: <number> in "<context>"' for every prose number nothing shows."""
    printed = set().union(*(printed_numbers(notebook) for notebook in executed.values()))
    problems = []
    for name, notebook in solution_notebooks.items():
        for index, cell in enumerate(notebook.cells):
            if cell.cell_type != "markdown" or cell.source.lstrip().startswith(MAP_HEADING):
                continue
            for number in prose_numbers(COMPANION_TIME.sub(" ", cell.source)):
                if number not in CITED and not shown(number, printed):
                    where = prose_of(cell.source)
                    at = where.find(number)
                    problems.append(f"{name} cell {index}: {number} in {where[max(0, at - 40) : at + 40]!r}")
    return problems


def _solutions() -> dict:
    """The stages and their companions, as solutions/ holds them."""
    return {name: nbformat.read(SOLUTIONS / name, as_version=4) for name in (*NOTEBOOKS, *companions.names())}


def test_number_finder_reads_prose():
    """The number finder reads prose as intended."""
    assert prose_numbers("a 1.83x rise, 256 bytes, rtol 1e-6, JAX 0.9.2 and [−0.5, 0.5]") == [
        "1.83",
        "256",
        "1e-6",
        "0.9.2",
        "-0.5",
        "0.5",
    ]
    assert prose_numbers("float32, v1, 2v, W_l, `jnp.linspace(-1, 1, 16)`, $x^2$, L^0.44") == []
    assert prose_numbers("1. first\n2. second: 9 entries.") == ["9"]
    assert shown("1.8", {"1.83"}) and shown("9", {"9"}) and not shown("10", {"9"}) and not shown("1.84", {"1.83"})


def test_prose_numbers_printed_or_cited(solution_runs):
    """Every number in the prose is printed or cited."""
    executed = {name: run.notebook for name, run in solution_runs.executions.items()}
    problems = unshown_numbers(_solutions(), executed)
    assert problems == [], (
        "numbers in the prose that no code cell of the executed solutions prints, and that are not cited "
        "constants (CITED in this file):\n  " + "\n  ".join(problems)
    )


# ---------------------------------------------------------------------------------------
# Each stage's map.
# ---------------------------------------------------------------------------------------
WORDS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5}


def _map(notebook) -> str:
    cells = [
        c.source for c in notebook.cells if c.cell_type == "markdown" and c.source.lstrip().startswith(MAP_HEADING)
    ]
    assert len(cells) == 1, f"expected one '{MAP_HEADING}' cell, found {len(cells)}"
    return " ".join(cells[0].split())


def _graded(notebook) -> tuple[list[float], list[float]]:
    """Points of the automatically graded cells, and of the written answers a person grades."""
    auto, manual = [], []
    for cell in notebook.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            (manual if meta.get("solution") else auto).append(float(meta["points"]))
    return auto, manual


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_stage_map_opens_and_states_points(name):
    """Each stage opens with its map and the map states the points it carries."""
    notebook = nbformat.read(SOLUTIONS / name, as_version=4)
    first_markdown = [i for i, c in enumerate(notebook.cells) if c.cell_type == "markdown"][:2]
    assert any(notebook.cells[i].source.lstrip().startswith(MAP_HEADING) for i in first_markdown), (
        "the map is not at the top"
    )
    text, (auto, manual) = _map(notebook), _graded(notebook)
    assert re.search(r"\*\*This stage:\*\* about \d+ minutes", text), text
    assert "**Needs:**" in text
    total = re.search(r"\*\*Points:\*\* (\d+)", text)
    assert total and float(total.group(1)) == sum(auto) + sum(manual), f"{text}: auto {auto}, manual {manual}"
    automatic = re.search(r"(\d+),? checked automatically(?: \((\w+) graded cells?)?", text)
    assert (float(automatic.group(1)) if automatic else 0.0) == sum(auto), text
    if automatic and automatic.group(2):
        assert WORDS[automatic.group(2)] == len(auto), text
    by_person = re.search(r"(\d+),? read by a person", text)
    assert (float(by_person.group(1)) if by_person else 0.0) == sum(manual), text
    shipped = [f for f in SHIPPED_FILES if f in text]
    assert "reference-execution.txt" in shipped or "storage-views.png" in shipped, (
        f"{name}: the map points to no recorded output"
    )


def test_stages_marked_in_recorded_execution():
    """The maps send learners to 'the line Stage N of 5' of reference-execution.txt: it is there, once."""
    recorded = (DATA / "reference-execution.txt").read_text()
    for number, name in enumerate(NOTEBOOKS, start=1):
        marker = f"Stage {number} of 5 · "
        assert recorded.count(marker) == 1, f"{marker!r} in reference-execution.txt: {recorded.count(marker)} times"
        map_text = _map(nbformat.read(SOLUTIONS / name, as_version=4))
        if "reference-execution" in map_text:  # a map that sends learners there names their line
            assert marker.strip(" ·") in map_text, f"stage {number}'s map names reference-execution.txt, not its line"
