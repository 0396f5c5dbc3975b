"""The hand decoder of ``KeyValue`` agrees with the generated class on every shape."""

from __future__ import annotations

import math

import pytest
from google.protobuf.message import DecodeError
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue

from otel_agent_context.processor._wire import any_value, decode_key_value

_scalars = st.one_of(
    st.text(max_size=300).map(lambda v: ("string_value", v)),
    st.integers(min_value=-(2**63), max_value=2**63 - 1).map(lambda v: ("int_value", v)),
    st.floats(allow_nan=False).map(lambda v: ("double_value", v)),
    st.booleans().map(lambda v: ("bool_value", v)),
)


def _encode(key: str, kind: str | None, value) -> bytes:
    kv = KeyValue(key=key)
    if kind == "array_value":
        kv.value.array_value.CopyFrom(ArrayValue(values=[AnyValue(string_value=v)
                                                          for v in value]))
    elif kind is not None:
        setattr(kv.value, kind, value)
    return kv.SerializeToString()


@settings(max_examples=500, deadline=None)
@given(key=st.text(max_size=200), scalar=_scalars)
def test_scalars_match_the_generated_class(key: str, scalar) -> None:
    kind, value = scalar
    buf = _encode(key, kind, value)
    got_key, got_value, got_kind = decode_key_value(buf)
    reference = KeyValue.FromString(buf)
    assert got_key == reference.key == key
    ref_kind = reference.value.WhichOneof("value")
    assert got_kind == ref_kind
    if ref_kind is not None:
        expected = any_value(reference.value, ref_kind)
        assert got_value == expected or (math.isnan(got_value) and math.isnan(expected))
        assert type(got_value) is type(expected)


def test_arrays_empty_values_and_last_field_wins() -> None:
    assert decode_key_value(_encode("a", "array_value", ["x", "y"])) == (
        "a", ("x", "y"), "array_value")
    assert decode_key_value(_encode("e", None, None)) == ("e", None, None)
    assert decode_key_value(b"\x0a\x01k") == ("k", None, None)  # no value field at all
    # two values in one AnyValue: protobuf keeps the last one
    two = b"\x0a\x01k\x12\x04\x18\x01\x18\x02"
    assert decode_key_value(two) == ("k", 2, "int_value")
    # an unknown field after the value is skipped
    unknown = b"\x0a\x01k\x12\x04\x18\x07\x78\x01"
    assert decode_key_value(unknown)[:2] == ("k", 7)


def test_malformed_raises_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_key_value(b"\x0a\x05ab")
