"""The judge's cost is bounded by what it received: no choice of keys makes decoding quadratic,
no array becomes one Python object per element, and no judgment keeps more than a bounded copy.

Each test counts what it bounds (keys refused, values kept, objects made), never a duration.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

from autograder.sandboxed.wire import MAX_SAME_HASH, WireError, decode, dumps, encode, loads

_MASK = (1 << 64) - 1
_P1, _P2, _P5 = 11400714785074694791, 14029467366897019727, 2870177450012600261
_MODULUS = (1 << 61) - 1  # integers hash to themselves modulo this


def _rotate_left(x: int, bits: int) -> int:
    return ((x << bits) | (x >> (64 - bits))) & _MASK


def _pair_hash(a: int, b: int) -> int:
    """CPython's hash of the tuple (a, b) of small non-negative ints (xxHash-based, 64-bit)."""
    acc = _P5
    for lane in (a, b):
        acc = (_rotate_left((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK
    return (acc + (2 ^ (_P5 ^ 3527539))) & _MASK


def colliding_pairs(count: int, target: int = 12345) -> list[tuple[int, int]]:
    """`count` distinct (a, b) tuples that all hash to one value: b is solved from a (each step of
    the tuple hash is invertible), kept when it is an int that hashes to itself."""
    inverse_p1, inverse_p2 = pow(_P1, -1, 1 << 64), pow(_P2, -1, 1 << 64)
    before_length = (target - (2 ^ (_P5 ^ 3527539))) & _MASK
    pairs, a = [], 0
    while len(pairs) < count:
        after_a = (_rotate_left((_P5 + a * _P2) & _MASK, 31) * _P1) & _MASK
        lane = (_rotate_left((before_length * inverse_p1) & _MASK, 33) - after_a) * inverse_p2 & _MASK
        if lane < _MODULUS:
            pairs.append((a, lane))
        a += 1
    return pairs


def test_the_fixture_keys_do_collide():
    pairs = colliding_pairs(50)
    assert len(set(pairs)) == 50
    assert {hash(pair) for pair in pairs} == {hash(pairs[0])}
    assert all(_pair_hash(*pair) & ((1 << 63) - 1) == hash(pair) & ((1 << 63) - 1) for pair in pairs)


def _tuple_key_dict(pairs) -> dict:
    return {"$dict": [[{"$tuple": list(pair)}, index] for index, pair in enumerate(pairs)]}


def test_same_hash_keys_refused_past_few():
    """49,000 tuple keys with one hash took minutes of the grader's CPU in one call; any number
    of keys of one hash past MAX_SAME_HASH is refused, whatever their type."""
    with pytest.raises(WireError, match="keys of one hash"):
        decode(loads(dumps(_tuple_key_dict(colliding_pairs(MAX_SAME_HASH + 1)))))
    assert len(decode(_tuple_key_dict(colliding_pairs(MAX_SAME_HASH)))) == MAX_SAME_HASH
    # Complex scalars: hash(a + b*1j) = hash(a) + 1000003 * hash(b), so a = -1000003 * b collide.
    complex_keys = [
        {
            "$array": {
                "dtype": "complex128",
                "shape": [],
                "data": base64.b64encode(np.complex128(complex(-1000003 * b, b)).tobytes()).decode(),
                "scalar": True,
            }
        }
        for b in range(MAX_SAME_HASH + 1)
    ]
    assert len({hash(decode(key)) for key in complex_keys}) == 1
    with pytest.raises(WireError, match="keys of one hash"):
        decode({"$dict": [[key, 0] for key in complex_keys]})


def test_ordinary_keys_travel_however_many():
    """Text, numbers (a few integers do share a hash: -1 and -2, n and n + 2**61 - 1), tuples."""
    value = {f"name {i}": i for i in range(20_000)}
    value.update({i: i for i in range(20_000)})
    value.update({-1: "a", -2: "b", _MODULUS + 5: "c", 5.0 + 2**61: "d", (1, 2): "e"})
    back = decode(loads(dumps(encode(value))))
    assert back == value


# ---------------------------------------------------------------------------------------
# What a judgment costs and keeps.
# ---------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def checks():
    import importlib.util

    from autograder.course.paths import SOLUTIONS

    spec = importlib.util.spec_from_file_location("remat_checks_cost_under_test", SOLUTIONS / "remat_checks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.JUDGE = 1  # as in the grader's judge
    yield module
    module.JUDGE = None


def _peak_bytes(run) -> int:
    """The most memory allocated at once while run() runs (Python objects and NumPy buffers)."""
    import tracemalloc

    tracemalloc.start()
    try:
        run()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _timing_cell(checks, samples):
    """The first item of 02's timing cell, given `samples` the learner's code returned."""
    cell = checks.Checks(1, where="here")
    with cell.item(1, "seven samples, each a positive number of seconds"):
        cell.equal(len(samples), 7, what="the number of samples")
        cell.at_least(samples, 1e-9, what="every duration in seconds")
        cell.below(samples, np.full(7, 0.5), what="every sample")
    return cell


BYTES = 4 << 20  # a timing "sample" array of 4 MiB of bytes, 7 rows


def test_byte_samples_cost_small_factor(checks):
    """Timing samples sent as a byte array became one Python float per byte (about 70 bytes of
    the grader's memory per byte received); judged now in their own dtype, the most allocated at
    once is a small multiple of the array (the comparisons' boolean masks)."""
    samples = np.ones((7, BYTES // 7), dtype=np.uint8)
    cell = None

    def judge():
        nonlocal cell
        cell = _timing_cell(checks, samples)

    peak = _peak_bytes(judge)
    assert cell.items[0]["failure"] is not None and "expected 7 of every sample" in cell.items[0]["failure"]
    assert peak < 4 * samples.nbytes, f"{peak / samples.nbytes:.1f} bytes allocated per byte received"
    found = checks.numbers(samples)
    assert np.shares_memory(found["values"], samples), "the received array was copied"


def test_decided_judgment_keeps_bounded_copy(checks):
    """Every judgment stays with its cell until the next cell: once decided it keeps at most
    KEPT_VALUES numbers of each side, and nothing of the array the learner's code returned."""
    import weakref

    samples = np.ones((7, BYTES // 7), dtype=np.uint8)
    gone = weakref.ref(samples)
    cell = _timing_cell(checks, samples)
    del samples
    assert gone() is None, "a judgment still holds the learner's array"
    for item in cell.items:
        for judgment in item["judgments"]:
            for side in ("found", "expected"):
                value = judgment.get(side)
                if isinstance(value, dict) and "values" in value:
                    assert np.size(value["values"]) <= checks.KEPT_VALUES
    assert cell.items[0]["judgments"][1]["found"]["shape"] == [7, BYTES // 7]


def test_plain_records_a_large_array_by_digest(checks):
    """`equal` on a learner-sized array records its shape, dtype and digest, not one Python value
    per element; equal arrays still compare equal, and a list is never equal to such a record."""
    big = np.arange(checks.PLAIN_ITEMS + 1, dtype=np.int32)
    peak = _peak_bytes(lambda: checks.plain(big))
    assert peak < 2 * big.nbytes
    assert checks.plain(big) == checks.plain(big.copy()) != checks.plain(big.tolist())
    assert checks.plain(big) != checks.plain(big[::-1].copy())
    small = np.arange(5)
    assert checks.plain(small) == [0, 1, 2, 3, 4]


def test_verdicts_unchanged_on_ordinary_values(checks):
    """The same verdicts as before on what the lesson's checks compare: numbers of every kind."""
    judge = lambda kind, found, expected, **kw: checks.judge(  # noqa: E731
        {"kind": kind, "what": "v", "found": checks.numbers(found), "expected": expected, **kw}
    )
    assert judge("at_least", [0.1, 0.2], checks.plain(0.05)) is None
    assert "number 2 of 2" in judge("at_least", [0.1, 0.0], checks.plain(0.05))
    assert "NaN" in judge("below", [np.nan], checks.plain(1.0))
    assert judge("below", np.array([1, 2], dtype=np.int8), checks.numbers([2, 3])) is None
    assert "found 1 (number 1 of 2)" in judge("below", np.array([True, True]), checks.plain(1.0))
    close = lambda found: checks.judge(  # noqa: E731
        {
            "kind": "close",
            "what": "v",
            "found": checks.numbers(found),
            "expected": checks.numbers([1.0, 2.0]),
            "rtol": 1e-6,
        }
    )
    assert close([1.0, 2.0]) is None and close(np.array([1, 2], dtype=np.uint8)) is None
    assert "shape (3,)" in close([1.0, 2.0, 3.0]) and "finite" in close([np.inf, 2.0])
    assert "as numbers" in close("text") and "as numbers" in close(["a", "b"])
