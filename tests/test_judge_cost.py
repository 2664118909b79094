"""The judge's cost is bounded by what it received: no choice of keys makes decoding quadratic,
no array becomes one Python object per element, and no judgment keeps more than a bounded copy.

Each test counts what it bounds (keys refused, values kept, objects made), never a duration.
"""

from __future__ import annotations

import base64

import numpy as np
import pytest

from autograder.wire import MAX_SAME_HASH, WireError, decode, dumps, encode, loads

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


def test_keys_that_share_a_hash_are_refused_past_a_few():
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
