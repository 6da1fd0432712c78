"""model_check: broken graphs are refused with one error naming the node and tensor, odd ones warned.

A mutation corpus is generated here (seeded) from every model in ``sample_models/``: each mutation has
one exact outcome through the CLI, ``refused`` (exit 1, one ``error:`` line naming the node/tensor, no
output file, the input unchanged) or ``warned`` (exit 0, the warning in ``--json`` ``warnings``). Never
another exit code, a traceback or "internal error". Unmutated samples give no warning at all, and every
mutation onnx.checker rejects is refused or warned. A seeded random corpus checks the same contract on
mutations nobody wrote an expectation for. Names that are not UTF-8 and truncated files:
test_check_bytes.py.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from support.cli_refusals import (
    REPO,
    SAMPLES,
    SEED,
    assert_refused,
    assert_warned,
    load_sample,
    run_json,
    seed,
)

from dcnconvert.errors import ModelError
from dcnconvert.model import check as model_check

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


def _mutated(sample: str, kind: str) -> tuple[onnx.ModelProto, onnx.ModelProto, tuple[str, ...] | None]:
    original = load_sample(sample)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    words = MUTATIONS[kind][0](model, np.random.default_rng(seed(sample, kind)))
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
        res, obj, _ = run_json(tmp_path, command, path)
        assert res.exit_code == 0, res.stderr
        assert obj["warnings"] == [], (command, obj["warnings"])
    assert model_check.checker_opinion(load_sample(sample)) is None
    assert model_check.check_model(load_sample(sample)) == []


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
    original = load_sample(sample)
    model = onnx.ModelProto()
    model.CopyFrom(original)
    kind = _random_mutation(model, rng)
    path = tmp_path / "random.onnx"
    onnx.save(model, str(path))
    res, obj, out = run_json(tmp_path, "rewrite", path)
    assert res.exit_code in (0, 1), (kind, res.stderr)
    if res.exit_code == 1:
        assert len(obj["errors"]) == 1 and not out.exists()
        assert "internal" not in obj["errors"][0]["message"].lower()
    broken = model_check.checker_opinion(original) is None and model_check.checker_opinion(model) is not None
    if broken:  # whatever onnx.checker sees is refused or warned, never passed on silently
        assert res.exit_code == 1 or obj["warnings"], (sample, kind, model_check.checker_opinion(model))
