"""model_check on broken bytes: a name that is not valid UTF-8 (at every place a name lives, in a
spread of the sample models) and a truncated file are refused by every command that reads the
model, with one error naming the place, and library callers get the same refusals. Offsets come
from walking the protobuf wire format of the sample file."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from support.cli_refusals import REPO, SAMPLES, assert_refused, load_sample, seed

from dcnconvert.errors import ModelError
from dcnconvert.model import io as onnx_io
from dcnconvert.transform.plugin import rewrite_model

# ------------------------------------------------------------------------------------------------
# bytes: names that are not UTF-8, truncated files
# ------------------------------------------------------------------------------------------------

def _varint(data: bytes, i: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[i]
        i += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, i


def _fields(data: bytes, start: int, end: int):
    """(field number, start, end) of the length-delimited fields of the message in data[start:end]."""
    i = start
    while i < end:
        key, i = _varint(data, i)
        wire = key & 7
        if wire == 0:
            _, i = _varint(data, i)
        elif wire in (1, 5):
            i += 8 if wire == 1 else 4
        else:
            length, i = _varint(data, i)
            yield key >> 3, i, i + length
            i += length


def _string_at(data: bytes, path: list[tuple[int, int]]) -> tuple[int, int]:
    """Byte range of the field reached by ``path`` ((field number, occurrence), ...)."""
    start, end = 0, len(data)
    for number, k in path:
        start, end = [(s, e) for f, s, e in _fields(data, start, end) if f == number][k]
    return start, end


def _break_utf8(data: bytes, path) -> bytes:
    """Overwrite the first bytes of a string with 0xc3 0x28 (just 0xc3 for a one-byte string)."""
    start, end = _string_at(data, path)
    bad = bytearray(data)
    bad[start:start + min(2, end - start)] = b"\xc3\x28"[: end - start]
    return bytes(bad)


GRAPH = (7, 0)
#: where -> path in the file (ModelProto.graph = 7; GraphProto node 1, initializer 5, input 11, output 12;
#: NodeProto input 1, output 2, name 3, op_type 4; ValueInfoProto / TensorProto name 1 / 8)
UTF8_PLACES = {
    "first graph input": ([GRAPH, (11, 0), (1, 0)], ("graph input #0", "\\xc3")),
    "node input": ([GRAPH, (1, -1), (1, 0)], ("input #0 of node", "\\xc3")),
    "node output": ([GRAPH, (1, -1), (2, 0)], ("output #0 of node", "\\xc3")),
    "node name": ([GRAPH, (1, -1), (3, 0)], ("the name of node '\\xc3",)),
    "initializer name": ([GRAPH, (5, 0), (8, 0)], ("initializer #0", "\\xc3")),
    "graph output": ([GRAPH, (12, 0), (1, 0)], ("graph output #0", "\\xc3")),
    "graph name": ([GRAPH, (2, 0)], ("the name of the main graph", "\\xc3")),
}


def test_the_reported_recipe(tmp_path):
    """The issue's file: two bytes of the first input name overwritten with 0xc3 0x28."""
    data = (REPO / "sample_models" / "onnx_DeformConv_swapped.onnx").read_bytes()
    start, end = _string_at(data, [GRAPH, (11, 0), (1, 0)])
    assert data[start:end] == b"x"  # one byte: the second one overwrites the next field's tag
    literal = bytearray(data)
    literal[start:start + 2] = b"\xc3\x28"
    path = tmp_path / "literal.onnx"
    path.write_bytes(bytes(literal))
    assert_refused(tmp_path, path, ("reads tensor 'x'",), commands=("inspect", "rewrite", "reference"))
    offset = data.index(b"\x0a\x06offset", start) + 2  # the second input's name: broken in place
    broken = bytearray(data)
    broken[offset:offset + 2] = b"\xc3\x28"
    path.write_bytes(bytes(broken))
    assert_refused(tmp_path, path, ("graph input #1", "'\\xc3(fset'", "not valid UTF-8"),
                   commands=("inspect", "rewrite", "reference", "convert"))


@pytest.mark.parametrize("place", sorted(UTF8_PLACES))
@pytest.mark.parametrize("sample", SAMPLES[::4])
def test_name_that_is_not_utf8_is_refused_by_every_command(tmp_path, sample, place):
    path_in_file, words = UTF8_PLACES[place]
    data = (REPO / "sample_models" / sample).read_bytes()
    try:
        bad = _break_utf8(data, path_in_file)
    except IndexError:
        pytest.skip(f"{sample} has no {place}")
    path = tmp_path / "bad.onnx"
    path.write_bytes(bad)
    assert_refused(tmp_path, path, (*words, "not valid UTF-8"), commands=("inspect", "rewrite", "reference"))


def test_library_callers_get_the_same_refusals():
    model = load_sample("mmcv_MMCVModulatedDeformConv2d.onnx")
    model.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ModelError, match="reads tensor 'nowhere'") as info:
        rewrite_model(model)
    assert info.value.node == "dcn0" and info.value.hint
    bad = onnx.ModelProto()
    bad.ParseFromString(_break_utf8(load_sample("mmcv_MMCVDeformConv2d.onnx").SerializeToString(),
                                    [GRAPH, (11, 0), (1, 0)]))
    with pytest.raises(ModelError, match="graph input #0 is not valid UTF-8"):
        rewrite_model(bad)
    bad.ParseFromString(_break_utf8(bad.SerializeToString(), [GRAPH, (2, 0)]))  # where copies trip
    with pytest.raises(ModelError, match="the name of the main graph is not valid UTF-8"):
        onnx_io.skeleton(bad)


@pytest.mark.parametrize("sample", SAMPLES[1::5])
def test_truncated_file_is_refused(tmp_path, sample):
    data = (REPO / "sample_models" / sample).read_bytes()
    start, end = _string_at(data, [GRAPH])
    cut = int(np.random.default_rng(seed(sample, "cut")).integers(start, end))
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:cut])
    assert_refused(tmp_path, path, ("truncated",), commands=("inspect", "rewrite"))
