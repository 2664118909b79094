"""What the compiler says about a compiled program, with unavailable kept as None.

cost_analysis() and memory_analysis() may return None or raise NotImplementedError on some
backends and versions. A missing figure is recorded as None with the reason, never as 0:
a zero would read as a measurement.
"""

from __future__ import annotations

import collections
import re

MEMORY_FIELDS = (
    "argument_size_in_bytes",
    "output_size_in_bytes",
    "alias_size_in_bytes",
    "temp_size_in_bytes",
    "generated_code_size_in_bytes",
)
COST_FIELDS = {"flops": "flops", "transcendentals": "transcendentals", "bytes_accessed": "bytes accessed"}
# One HLO instruction: "%name = <type> opcode(operands), attributes" (ROOT optional).
HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][\w\-]*)\(")


def _unavailable(reason: str, fields) -> dict:
    return {"available": False, "unavailable_reason": reason, **{field: None for field in fields}}


def cost_summary(compiled) -> dict:
    try:
        analysis = compiled.cost_analysis()
    except NotImplementedError as error:
        return _unavailable(f"cost_analysis raised NotImplementedError: {error}", COST_FIELDS)
    if isinstance(analysis, (list, tuple)):  # older JAX returned one dict per program
        analysis = analysis[0] if analysis else None
    if not analysis:
        return _unavailable("cost_analysis returned nothing", COST_FIELDS)
    summary = {"available": True, "unavailable_reason": None}
    for field, key in COST_FIELDS.items():
        value = analysis.get(key)
        summary[field] = float(value) if value is not None else None
    return summary


def memory_summary(compiled) -> dict:
    try:
        analysis = compiled.memory_analysis()
    except NotImplementedError as error:
        return _unavailable(f"memory_analysis raised NotImplementedError: {error}", MEMORY_FIELDS)
    if analysis is None:
        return _unavailable("memory_analysis returned None", MEMORY_FIELDS)
    summary = {"available": True, "unavailable_reason": None}
    for field in MEMORY_FIELDS:
        value = getattr(analysis, field, None)
        summary[field] = int(value) if value is not None else None
    return summary


def hlo_op_counts(hlo_text: str) -> dict[str, int]:
    counts = collections.Counter()
    for line in hlo_text.splitlines():
        match = HLO_INSTRUCTION.match(line)
        if match:
            counts[match.group(1)] += 1
    return dict(sorted(counts.items()))


def compiled_text(compiled) -> str | None:
    try:
        return compiled.as_text()
    except NotImplementedError:
        return None
