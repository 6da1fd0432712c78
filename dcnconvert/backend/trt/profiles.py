"""Input shapes and TensorRT optimization profiles from command-line options.

Syntax (the same for ``--shapes``, ``--min-shapes``, ``--opt-shapes``, ``--max-shapes``)::

    NAME:DIMS            DIMS = 1x3x512x512  or  [1,3,512,512]  or  1,3,512,512
    "a:1x3x64x64 b:1x8"  several inputs in one value, separated by spaces

The name is everything before the *last* colon, so names such as ``input:0`` work
(``input:0:1x3x8x8``). A scalar input is ``NAME:`` or ``NAME:[]``.

Profiles: every option may be repeated. Within ``--min-shapes`` (likewise opt/max) a name given a
second time starts the next optimization profile, so two profiles for input ``x`` are
``--min-shapes x:1x3x64x64 --min-shapes x:1x3x256x256`` (and the matching opt/max values).
``--opt-shapes`` defaults to ``--max-shapes``. ``--shapes`` fixes an input to one shape in every
profile (or makes the only profile when no min/max is given).

Every model input that has a dynamic dimension must be covered, otherwise :class:`UsageError` lists
those inputs with their dimensions. Nothing here imports TensorRT.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from dcnconvert.errors import UsageError

__all__ = [
    "InputInfo",
    "Profile",
    "build_profiles",
    "concrete_shapes",
    "format_dims",
    "model_inputs",
    "parse_dims",
    "parse_shape_values",
]

Dim = int | str | None
Shape = tuple[int, ...]

_DIMS_RE = re.compile(r"^\s*\[?\s*([0-9x,\s]*)\s*\]?\s*$")


@dataclass(frozen=True)
class InputInfo:
    """A graph input: name, dims (``int`` fixed, ``str`` symbolic, ``None`` unknown), ONNX elem type."""

    name: str
    dims: tuple[Dim, ...]
    elem_type: int = 1

    @property
    def is_dynamic(self) -> bool:
        """Whether any dimension is not a fixed non-negative integer."""
        return any(not isinstance(d, int) or d < 0 for d in self.dims)

    @property
    def static_shape(self) -> Shape | None:
        """The shape when it is fully fixed, else ``None``."""
        return None if self.is_dynamic else tuple(int(d) for d in self.dims)  # type: ignore[arg-type]


@dataclass
class Profile:
    """One optimization profile: ``name -> (min, opt, max)`` shapes for the inputs it covers."""

    shapes: dict[str, tuple[Shape, Shape, Shape]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, dict[str, list[int]]]:
        """JSON-ready ``{name: {"min": [...], "opt": [...], "max": [...]}}``."""
        return {
            name: {"min": list(mn), "opt": list(op), "max": list(mx)}
            for name, (mn, op, mx) in self.shapes.items()
        }


def format_dims(dims: Sequence[Dim]) -> str:
    """``[1,3,'height',?]``-style text of dims (``?`` for unknown)."""
    parts = []
    for d in dims:
        if d is None:
            parts.append("?")
        elif isinstance(d, str):
            parts.append(repr(d))
        else:
            parts.append(str(d))
    return "[" + ",".join(parts) + "]"


def model_inputs(model) -> list[InputInfo]:
    """The real inputs of an ONNX model (graph inputs that are not initializers), in order.

    Args:
        model: an ``onnx.ModelProto``.
    """
    initializers = {init.name for init in model.graph.initializer}
    out = []
    for value in model.graph.input:
        if value.name in initializers:
            continue
        tensor_type = value.type.tensor_type
        dims: list[Dim] = []
        if tensor_type.HasField("shape"):
            for d in tensor_type.shape.dim:
                if d.HasField("dim_value") and d.dim_value >= 0:
                    dims.append(int(d.dim_value))
                elif d.HasField("dim_param") and d.dim_param:
                    dims.append(d.dim_param)
                else:
                    dims.append(None)
        out.append(InputInfo(value.name, tuple(dims), int(tensor_type.elem_type)))
    return out


def parse_dims(text: str, option: str = "--shapes", name: str = "") -> Shape:
    """Parse ``1x3x512x512``, ``[1,3,512,512]`` or ``1,3,512,512`` into a tuple of ints.

    Raises:
        UsageError: the text is not a list of non-negative integers.
    """
    match = _DIMS_RE.match(text)
    items = [t for t in re.split(r"[x,\s]+", match.group(1)) if t] if match else None
    if items is None or (text.strip() not in ("", "[]") and not items):
        where = f" for input '{name}'" if name else ""
        raise UsageError(
            f"{option}: cannot read the dimensions {text!r}{where}",
            hint=f"write them as {option} NAME:1x3x512x512 (or NAME:[1,3,512,512])",
        )
    return tuple(int(t) for t in items)


def parse_shape_values(values: Iterable[str], option: str) -> list[dict[str, Shape]]:
    """Parse the repeated values of one shape option into a list of profiles (``name -> shape``).

    A name seen again starts the next profile.

    Raises:
        UsageError: an entry without ``NAME:`` or with bad dimensions.
    """
    profiles: list[dict[str, Shape]] = []
    for value in values:
        value = re.sub(r"\s*,\s*", ",", value)
        value = re.sub(r"\[\s+", "[", re.sub(r"\s+\]", "]", value))
        for entry in value.split():
            name, sep, dims_text = entry.rpartition(":")
            if not sep or not name:
                raise UsageError(
                    f"{option}: {entry!r} has no input name",
                    hint=f"write {option} NAME:1x3x512x512 (the name is everything before the last ':')",
                )
            dims = parse_dims(dims_text, option, name)
            if not profiles or name in profiles[-1]:
                profiles.append({})
            profiles[-1][name] = dims
    return profiles


def _check_against_input(info: InputInfo, shape: Shape, option: str) -> None:
    if info.dims and len(shape) != len(info.dims):
        raise UsageError(
            f"{option}: input '{info.name}' has rank {len(info.dims)} {format_dims(info.dims)}, "
            f"but {len(shape)} dimensions were given ({'x'.join(map(str, shape)) or 'scalar'})",
            hint=f"give {len(info.dims)} dimensions for '{info.name}'",
        )
    for axis, (want, got) in enumerate(zip(info.dims, shape, strict=False)):
        if isinstance(want, int) and want >= 0 and want != got:
            raise UsageError(
                f"{option}: input '{info.name}' has fixed dimension {want} at axis {axis} "
                f"{format_dims(info.dims)}, but {got} was given",
                hint=f"use {want} at axis {axis}; only dynamic dimensions can be chosen",
            )


def _check_names(given: Iterable[str], inputs: dict[str, InputInfo], option: str) -> None:
    for name in given:
        if name not in inputs:
            listing = ", ".join(f"{i.name} {format_dims(i.dims)}" for i in inputs.values()) or "(none)"
            raise UsageError(
                f"{option}: the model has no input named '{name}'",
                hint=f"the model's inputs are: {listing}",
            )


def _missing_error(missing: list[InputInfo], profile_index: int | None) -> UsageError:
    listing = "; ".join(f"{i.name} {format_dims(i.dims)}" for i in missing)
    example = " ".join(
        f"{i.name}:" + "x".join(str(d) if isinstance(d, int) and d >= 0 else "N" for d in i.dims)
        for i in missing
    )
    where = "" if profile_index is None else f" in optimization profile {profile_index}"
    return UsageError(
        f"the model has dynamic inputs without shapes{where}: {listing}",
        hint=f"give a static shape with --shapes '{example}' (replace N), or a range with "
        f"--min-shapes/--opt-shapes/--max-shapes",
    )


def build_profiles(
    inputs: Sequence[InputInfo],
    shapes: Iterable[str] = (),
    min_shapes: Iterable[str] = (),
    opt_shapes: Iterable[str] = (),
    max_shapes: Iterable[str] = (),
) -> list[Profile]:
    """Turn the shape options into optimization profiles for ``inputs``.

    Args:
        inputs: the model's inputs (:func:`model_inputs`).
        shapes: ``--shapes`` values (static shapes).
        min_shapes: ``--min-shapes`` values.
        opt_shapes: ``--opt-shapes`` values (default: the max shapes).
        max_shapes: ``--max-shapes`` values.

    Returns:
        The profiles; empty when every input is static and no option was given (TensorRT needs none).
        Static inputs not named in an option are left out (TensorRT knows their shape).

    Raises:
        UsageError: a syntax error, an unknown input name, a rank or fixed-dimension mismatch,
            ``min > opt`` or ``opt > max``, min without max (or the reverse), profiles that do not
            name the same inputs, an input in both --shapes and a min/opt/max option, or dynamic
            inputs left without shapes.
    """
    by_name = {i.name: i for i in inputs}
    static = parse_shape_values(shapes, "--shapes")
    if len(static) > 1:
        repeated = sorted(set(static[0]) & set(static[1]))
        raise UsageError(
            f"--shapes: input '{repeated[0]}' is given more than once",
            hint="--shapes takes one shape per input; use --min-shapes/--opt-shapes/--max-shapes for ranges "
            "or several profiles",
        )
    fixed = static[0] if static else {}
    mins = parse_shape_values(min_shapes, "--min-shapes")
    opts = parse_shape_values(opt_shapes, "--opt-shapes")
    maxs = parse_shape_values(max_shapes, "--max-shapes")
    _check_names(fixed, by_name, "--shapes")
    for option, profs in (("--min-shapes", mins), ("--opt-shapes", opts), ("--max-shapes", maxs)):
        for prof in profs:
            _check_names(prof, by_name, option)
    if bool(mins) != bool(maxs):
        given, absent = ("--min-shapes", "--max-shapes") if mins else ("--max-shapes", "--min-shapes")
        raise UsageError(
            f"{given} was given without {absent}",
            hint="give both --min-shapes and --max-shapes (and optionally --opt-shapes, default: the max)",
        )
    if opts and not mins:
        raise UsageError(
            "--opt-shapes was given without --min-shapes/--max-shapes",
            hint="give --min-shapes and --max-shapes too, or use --shapes for one static shape",
        )
    if not opts:
        opts = [dict(p) for p in maxs]
    if not (len(mins) == len(opts) == len(maxs)):
        raise UsageError(
            f"--min-shapes, --opt-shapes and --max-shapes describe {len(mins)}, {len(opts)} and {len(maxs)} "
            "profiles",
            hint="each profile needs a min, opt and max shape for every input it names",
        )

    profiles: list[Profile] = []
    for index, (mn, op, mx) in enumerate(zip(mins, opts, maxs, strict=True)):
        if not (set(mn) == set(op) == set(mx)):
            raise UsageError(
                f"optimization profile {index}: --min-shapes names {sorted(mn)}, --opt-shapes {sorted(op)}, "
                f"--max-shapes {sorted(mx)}",
                hint="name the same inputs in the min, opt and max shapes of a profile",
            )
        prof = Profile()
        for name in mn:
            if name in fixed:
                raise UsageError(
                    f"input '{name}' is given both in --shapes and in --min/--opt/--max-shapes",
                    hint="use one of the two for each input",
                )
            info = by_name[name]
            for option, shape in (("--min-shapes", mn[name]), ("--opt-shapes", op[name]),
                                  ("--max-shapes", mx[name])):
                _check_against_input(info, shape, option)
            lo, mid, hi = mn[name], op[name], mx[name]
            if (any(a > b for a, b in zip(lo, mid, strict=False))
                    or any(a > b for a, b in zip(mid, hi, strict=False))):
                raise UsageError(
                    f"optimization profile {index}: input '{name}' needs min <= opt <= max in every "
                    f"dimension, "
                    f"got min {list(lo)}, opt {list(mid)}, max {list(hi)}",
                    hint="check the order of --min-shapes, --opt-shapes and --max-shapes",
                )
            prof.shapes[name] = (lo, mid, hi)
        profiles.append(prof)

    for name, shape in fixed.items():
        _check_against_input(by_name[name], shape, "--shapes")
    if fixed:
        if not profiles:
            profiles.append(Profile())
        for prof in profiles:
            for name, shape in fixed.items():
                prof.shapes[name] = (shape, shape, shape)

    dynamic = [i for i in inputs if i.is_dynamic]
    if not profiles:
        if dynamic:
            raise _missing_error(dynamic, None)
        return []
    for index, prof in enumerate(profiles):
        missing = [i for i in dynamic if i.name not in prof.shapes]
        if missing:
            raise _missing_error(missing, index if len(profiles) > 1 else None)
        for name, (lo, _mid, _hi) in prof.shapes.items():
            if any(d < 0 for d in lo):
                raise UsageError(f"input '{name}': negative dimension in {list(lo)}",
                                 hint="dimensions are >= 0")
    return profiles


def concrete_shapes(
    inputs: Sequence[InputInfo],
    profiles: Sequence[Profile] = (),
    engine_shapes: dict[str, Shape] | None = None,
) -> dict[str, Shape]:
    """One concrete shape per input, to generate data: the static shape, else profile 0's opt shape.

    Args:
        inputs: the model's inputs.
        profiles: profiles from :func:`build_profiles` (the first one is used).
        engine_shapes: shapes to use for inputs that neither the model nor the profiles fix
            (e.g. the opt shapes of an engine's first profile).

    Raises:
        UsageError: a dynamic input has no shape from any source.
    """
    out: dict[str, Shape] = {}
    missing = []
    first = profiles[0].shapes if profiles else {}
    for info in inputs:
        if info.name in first:
            out[info.name] = tuple(first[info.name][1])
        elif info.static_shape is not None:
            out[info.name] = info.static_shape
        elif engine_shapes and info.name in engine_shapes:
            out[info.name] = tuple(engine_shapes[info.name])
        else:
            missing.append(info)
    if missing:
        raise _missing_error(missing, None)
    return out
