"""model_check: broken graphs are refused with one error naming the node and tensor, odd ones warned.

A mutation corpus is generated here (seeded) from every model in ``sample_models/``: each mutation has
one exact outcome through the CLI, ``refused`` (exit 1, one ``error:`` line naming the node/tensor, no
output file, the input unchanged) or ``warned`` (exit 0, the warning in ``--json`` ``warnings``). Never
another exit code, a traceback or "internal error". Unmutated samples give no warning at all, and every
mutation onnx.checker rejects is refused or warned. A seeded random corpus checks the same contract on
mutations nobody wrote an expectation for.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from dcnconvert.cli.main import cli
from dcnconvert.errors import ModelError
from dcnconvert.model import check as model_check
from dcnconvert.model import io as onnx_io
from dcnconvert.transform.plugin import rewrite_model

REPO = Path(__file__).resolve().parents[2]
SAMPLES = sorted(p.name for p in (REPO / "sample_models").glob("*.onnx"))
SEED = 20240611


def _load(name: str) -> onnx.ModelProto:
    return onnx.load(str(REPO / "sample_models" / name))


def _run(tmp_path: Path, command: str, model: Path) -> tuple[object, dict, Path]:
    out = tmp_path / f"out_{command}.{'engine' if command in ('build', 'convert') else 'onnx'}"
    args = [command, str(model), "--json"] + ([] if command == "inspect" else ["-o", str(out)])
    res = CliRunner().invoke(cli, args)
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr
    lines = res.stdout.splitlines()
    assert len(lines) == 1, res.stdout
    return res, json.loads(lines[0]), out


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def assert_refused(tmp_path: Path, model: Path, words: tuple[str, ...], commands=("rewrite",)) -> None:
    """Exit 1, one ModelError naming ``words``, no output written, the input unchanged."""
    before = _sha(model)
    for command in commands:
        res, obj, out = _run(tmp_path, command, model)
        assert res.exit_code == 1, (command, res.stderr)
        lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(lines) == 1 and len(obj["errors"]) == 1, res.stderr
        assert obj["errors"][0]["type"] == "ModelError" and obj["errors"][0]["hint"]
        assert all(w in lines[0] for w in words), (words, lines[0])
        assert not list(tmp_path.glob("out_*")) and not list(tmp_path.glob(".out_*"))
    assert _sha(model) == before


def assert_warned(tmp_path: Path, model: Path, words: tuple[str, ...]) -> None:
    """Exit 0, one warning naming ``words`` in --json (and on stderr), the output written."""
    for command in ("rewrite", "inspect"):
        res, obj, out = _run(tmp_path, command, model)
        assert res.exit_code == 0, res.stderr
        assert len([t for t in obj["warnings"] if all(w in t for w in words)]) == 1, (words, obj["warnings"])
        assert any(all(w in ln for w in words) for ln in res.stderr.splitlines()), res.stderr
    assert (tmp_path / "out_rewrite.onnx").exists()


# ------------------------------------------------------------------------------------------------
# the corpus: mutation(model, rng) -> words the message must contain, or None where it does not apply
# ------------------------------------------------------------------------------------------------

def _label(model: onnx.ModelProto, i: int) -> str:
    return model_check.node_ref(model.graph.node[i], i)


def _readers(model: onnx.ModelProto) -> list[tuple[int, int]]:
    """(node, input position) of every non-empty node input."""
    return [(i, j) for i, n in enumerate(model.graph.node) for j, name in enumerate(n.input) if name]


def drop_producer(model, rng):
    produced = {o: i for i, n in enumerate(model.graph.node) for o in n.output}
    fed = sorted({(produced[name], name) for n in model.graph.node for name in n.input if name in produced})
    if not fed:
        return None
    victim, tensor = fed[int(rng.integers(len(fed)))]
    outs = set(model.graph.node[victim].output)
    reader = next(i for i, n in enumerate(model.graph.node) if i != victim and outs & set(n.input))
    words = (model.graph.node[reader].name, "reads tensor")
    del model.graph.node[victim]
    return words


def dangling_input(model, rng):
    readers = _readers(model)
    i, j = readers[int(rng.integers(len(readers)))]
    node = model.graph.node[i]
    node.input[j] = f"{node.input[j]}__missing"
    return (_label(model, i), f"'{node.input[j]}'", "reads tensor")


def duplicate_output(model, rng):
    i = int(rng.integers(len(model.graph.node)))
    tensor = model.graph.node[i].output[0]
    writer = helper.make_node("Identity", [model.graph.input[0].name], [tensor], name="dup_writer")
    model.graph.node.append(writer)
    return ("node 'dup_writer' (Identity)", f"'{tensor}'", "already produces")


def output_is_input(model, rng):
    i = int(rng.integers(len(model.graph.node)))
    tensor = model.graph.input[0].name
    model.graph.node[i].output[0] = tensor
    return (_label(model, i), f"'{tensor}'", "also a graph input")


def clear_input_type(model, rng):
    inits = {t.name for t in model.graph.initializer}
    inputs = [vi for vi in model.graph.input if vi.name not in inits]
    vi = inputs[int(rng.integers(len(inputs)))]
    vi.ClearField("type")
    return (f"graph input '{vi.name}'", "no tensor element type")


def dangling_graph_output(model, rng):
    model.graph.output.append(helper.make_tensor_value_info("ghost_output", TensorProto.FLOAT, [1]))
    return ("graph output 'ghost_output'", "produced by no node")


def output_points_at_nothing(model, rng):
    vi = model.graph.output[int(rng.integers(len(model.graph.output)))]
    vi.name = f"{vi.name}__nowhere"
    return (f"graph output '{vi.name}'", "produced by no node")


def cycle(model, rng):
    if len(model.graph.node) < 3:
        return None
    first, last = model.graph.node[0], model.graph.node[-1]
    first.input[0] = last.output[0]  # a chain: the last node depends on the first one
    return ("cycle", _label(model, 0))


def clear_value_info_type(model, rng):
    i = int(rng.integers(len(model.graph.node)))
    tensor = model.graph.node[i].output[0]
    model.graph.value_info.append(onnx.ValueInfoProto(name=tensor))
    return ("value_info", f"'{tensor}'", "without a type")


def duplicate_node_name(model, rng):
    i = int(rng.integers(len(model.graph.node)))
    node = model.graph.node[i]
    model.graph.node.append(helper.make_node("Identity", [node.output[0]], ["dup_name_out"], name=node.name))
    return (f"'{node.name}' (2 nodes)", "more than once")


def empty_node_name(model, rng):
    i = int(rng.integers(len(model.graph.node)))
    node = model.graph.node[i]
    node.name = ""
    return (f"'<unnamed {node.op_type} #{i}>'", "without a name")


def unused_initializer(model, rng):
    values = rng.standard_normal(4).astype(np.float32)
    model.graph.initializer.append(numpy_helper.from_array(values, "unused_init"))
    return ("'unused_init'", "no node reads")


def unsorted(model, rng):
    nodes = list(model.graph.node)
    if len(nodes) < 2:
        return None
    del model.graph.node[:]
    model.graph.node.extend([nodes[-1]] + nodes[:-1])
    return ("not topologically sorted", f"node '{nodes[-1].name}'")


def duplicate_opset(model, rng):
    entry = model.opset_import[int(rng.integers(len(model.opset_import)))]
    model.opset_import.append(helper.make_opsetid(entry.domain, entry.version))
    return ("opset_import lists", "2 times")


def custom_domain_not_imported(model, rng):
    used = {n.domain for n in model.graph.node} - {"", "ai.onnx"}
    entries = [i for i, e in enumerate(model.opset_import) if e.domain in used]
    if not entries:
        return None
    domain = model.opset_import[entries[0]].domain
    del model.opset_import[entries[0]]
    return (f"'{domain}'", "opset_import does not list")


#: mutation -> (the function, its outcome: "refused" or "warned")
MUTATIONS: dict[str, tuple[Callable, str]] = {
    "drop_producer": (drop_producer, "refused"),
    "dangling_input": (dangling_input, "refused"),
    "duplicate_output": (duplicate_output, "refused"),
    "output_is_input": (output_is_input, "refused"),
    "clear_input_type": (clear_input_type, "refused"),
    "dangling_graph_output": (dangling_graph_output, "refused"),
    "output_points_at_nothing": (output_points_at_nothing, "refused"),
    "cycle": (cycle, "refused"),
    "clear_value_info_type": (clear_value_info_type, "warned"),
    "duplicate_node_name": (duplicate_node_name, "warned"),
    "empty_node_name": (empty_node_name, "warned"),
    "unused_initializer": (unused_initializer, "warned"),
    "unsorted": (unsorted, "warned"),
    "duplicate_opset": (duplicate_opset, "warned"),
    "custom_domain_not_imported": (custom_domain_not_imported, "warned"),
}


def _seed(*parts: str) -> int:
    return SEED + int(hashlib.sha256("/".join(parts).encode()).hexdigest()[:8], 16)


def _mutated(sample: str, kind: str) -> tuple[onnx.ModelProto, onnx.ModelProto, tuple[str, ...] | None]:
    original = _load(sample)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    words = MUTATIONS[kind][0](model, np.random.default_rng(_seed(sample, kind)))
    return original, model, words


#: (sample, mutation) pairs where the mutation applies (a single-node model has no producer to drop)
CASES = [(s, k) for s in SAMPLES for k in MUTATIONS if _mutated(s, k)[2] is not None]


@pytest.mark.parametrize("sample,kind", CASES)
def test_mutation_has_its_exact_outcome(tmp_path, sample, kind):
    _, model, words = _mutated(sample, kind)
    path = tmp_path / "mutated.onnx"
    onnx.save(model, str(path))
    if MUTATIONS[kind][1] == "refused":
        assert_refused(tmp_path, path, words, commands=("rewrite", "inspect", "reference"))
    else:
        assert_warned(tmp_path, path, words)


def _checker_rejects(model: onnx.ModelProto) -> bool:
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError:
        return True
    return False


def test_what_onnx_checker_rejects_is_refused_or_warned():
    """Plain onnx.checker on the samples it accepts: each mutation it rejects is refused or warned."""
    rejected = 0
    for sample, kind in CASES:
        original, model, _ = _mutated(sample, kind)
        if _checker_rejects(original) or not _checker_rejects(model):
            continue
        rejected += 1
        try:
            warnings = model_check.check_model(model, warn=False)
        except ModelError:
            continue
        assert warnings, (sample, kind)
    assert rejected >= 70  # the corpus does reach what the checker sees (79 of its cases)


@pytest.mark.parametrize("sample", SAMPLES)
def test_unmutated_sample_passes_without_a_warning(tmp_path, sample):
    path = REPO / "sample_models" / sample
    for command in ("inspect", "rewrite"):
        res, obj, _ = _run(tmp_path, command, path)
        assert res.exit_code == 0, res.stderr
        assert obj["warnings"] == [], (command, obj["warnings"])
    assert model_check.checker_opinion(_load(sample)) is None
    assert model_check.check_model(_load(sample)) == []


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
    model = _load("mmcv_MMCVModulatedDeformConv2d.onnx")
    model.graph.node[0].input[0] = "nowhere"
    with pytest.raises(ModelError, match="reads tensor 'nowhere'") as info:
        rewrite_model(model)
    assert info.value.node == "dcn0" and info.value.hint
    bad = onnx.ModelProto()
    bad.ParseFromString(_break_utf8(_load("mmcv_MMCVDeformConv2d.onnx").SerializeToString(),
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
    cut = int(np.random.default_rng(_seed(sample, "cut")).integers(start, end))
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[:cut])
    assert_refused(tmp_path, path, ("truncated",), commands=("inspect", "rewrite"))


# ------------------------------------------------------------------------------------------------
# subgraphs and the random corpus
# ------------------------------------------------------------------------------------------------

def _if_model(body_input: str) -> onnx.ModelProto:
    body = helper.make_graph([helper.make_node("Relu", [body_input], ["r"], name="relu_in_body")], "body", [],
                             [helper.make_tensor_value_info("r", TensorProto.FLOAT, [2])])
    graph = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["a"], name="abs"),
         helper.make_node("If", ["cond"], ["y"], then_branch=body, else_branch=body, name="if0")],
        "g", [helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
              helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_subgraphs_may_read_outer_names_but_not_dangling_ones():
    assert model_check.check_model(_if_model("a")) == []  # 'a' is produced in the main graph
    expected = "node 'relu_in_body' \\(Relu\\) reads tensor 'gone'.*body of node 'if0'"
    with pytest.raises(ModelError, match=expected):
        model_check.check_model(_if_model("gone"))


RANDOM_KINDS = ("rename_input", "rename_output", "delete_node", "delete_initializer", "delete_graph_input",
                "swap_nodes", "clear_type", "rename_initializer")


def _random_mutation(model: onnx.ModelProto, rng: np.random.Generator) -> str:
    graph = model.graph
    kind = RANDOM_KINDS[int(rng.integers(len(RANDOM_KINDS)))]
    names = sorted({n for node in graph.node for n in list(node.input) + list(node.output) if n})
    pick = lambda seq: seq[int(rng.integers(len(seq)))]  # noqa: E731
    node = pick(graph.node)
    if kind == "rename_input" and node.input:
        node.input[int(rng.integers(len(node.input)))] = pick(names + ["nowhere"])
    elif kind == "rename_output":
        node.output[0] = pick(names + ["elsewhere"])
    elif kind == "delete_node":
        graph.node.remove(node)
    elif kind == "delete_initializer" and graph.initializer:
        del graph.initializer[int(rng.integers(len(graph.initializer)))]
    elif kind == "delete_graph_input":
        del graph.input[int(rng.integers(len(graph.input)))]
    elif kind == "swap_nodes" and len(graph.node) > 1:
        nodes = list(graph.node)
        i, j = rng.choice(len(nodes), 2, replace=False)
        nodes[i], nodes[j] = nodes[j], nodes[i]
        del graph.node[:]
        graph.node.extend(nodes)
    elif kind == "clear_type":
        pick(list(graph.input) + list(graph.output)).ClearField("type")
    elif kind == "rename_initializer" and graph.initializer:
        pick(graph.initializer).name = pick(names + ["renamed_init"])
    return kind


@pytest.mark.parametrize("index", range(40))
def test_random_mutations_keep_the_contract(tmp_path, index):
    rng = np.random.default_rng(SEED + index)
    sample = SAMPLES[int(rng.integers(len(SAMPLES)))]
    original = _load(sample)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    kind = _random_mutation(model, rng)
    path = tmp_path / "random.onnx"
    onnx.save(model, str(path))
    res, obj, out = _run(tmp_path, "rewrite", path)
    assert res.exit_code in (0, 1), (kind, res.stderr)
    if res.exit_code == 1:
        assert len(obj["errors"]) == 1 and not out.exists()
        assert "internal" not in obj["errors"][0]["message"].lower()
    broken = model_check.checker_opinion(original) is None and model_check.checker_opinion(model) is not None
    if broken:  # whatever onnx.checker sees is refused or warned, never passed on silently
        assert res.exit_code == 1 or obj["warnings"], (sample, kind, model_check.checker_opinion(model))
