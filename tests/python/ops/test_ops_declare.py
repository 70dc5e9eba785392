"""The kernel families' declarations (python/jitkern/ops/_declare.py): each op is declared once, in its
family's module, and jitkern.ops (OPS, `__all__`, specs, warmup), `jitkern prebuild --ops`, the torch custom
ops and docs/ops.md's op table follow from them. Runs without a GPU and without torch."""

import importlib
import inspect
import re
from pathlib import Path

import pytest

from jitkern import ops
from jitkern.ops._declare import Family, TorchOp, _calling, param_names, wrapper
from conftest import REPO



def test_every_family_is_four_files_and_includes_no_other():
    """A kernel family is csrc/<f>.cuh, python/jitkern/ops/<f>.py, tests/python/ops/test_<f>.py and
    benchmarks/bench_<f>.py; a family's .cuh includes no other family's (shared pieces live in
    include/jitkern/impl/); jitkern.ops exports every op of every family."""
    for family in ops.FAMILIES:
        for path in (f"csrc/{family}.cuh", f"python/jitkern/ops/{family}.py", f"tests/python/ops/test_{family}.py",
                     f"benchmarks/bench_{family}.py"):
            assert (REPO / path).is_file(), f"the {family} family has no {path}"
        local = re.findall(r'^#include\s+"([^"]+)"', (REPO / f"csrc/{family}.cuh").read_text(), re.M)
        assert not [f for f in local if f.removesuffix(".cuh") in ops.FAMILIES], f"csrc/{family}.cuh includes {local}"
    assert set(ops.OPS) <= set(ops.__all__) and all(getattr(ops, op) is not None for op in ops.OPS)


def test_every_op_is_its_declared_function_and_calls_declared_exports():
    """jitkern.ops.<op> is the function declared under that name, in the family module OPS names; every
    export an op declares is one of its family's sources' (checked when declared, too)."""
    for op, family in ops.OPS.items():
        module = importlib.import_module(f"jitkern.ops.{family}")  # ops.add_constant is the op
        declared = module.FAMILY.ops[op]
        assert getattr(ops, op) is declared.function is getattr(module, op) and declared.function.__name__ == op
        sources = {e for s in module.FAMILY.sources for e in s.params}
        assert declared.exports and set(declared.exports) <= sources, (op, declared.exports)



def test_dtypes_and_constants_pick_the_modules_of_the_families_built_per_dtype_or_constant():
    """DTYPE_FAMILIES are the families whose modules `dtypes` picks among, CONSTANT_FAMILIES those built once per
    constant (nothing without one); the others build the same either way. `jitkern prebuild` reads both."""
    assert {"norm", "quant", "act", "moe", "rope"} <= set(ops.DTYPE_FAMILIES) < set(ops.FAMILIES)
    assert ops.CONSTANT_FAMILIES == ("add_constant",)
    for family in ops.FAMILIES:
        bf16, every = ops.specs([family], dtypes=["bfloat16"], constants=[1]), ops.specs([family], constants=[1])
        if family in ops.DTYPE_FAMILIES:
            assert {s for s in bf16 if "bf16_t" in s.args} and set(bf16) < set(every), family
            assert not {s for s in bf16 if {"fp16_t", "fp32_t"} & set(s.args)}, family
        else:
            assert bf16 == every, family
        two = ops.specs([family], constants=[1, 2])
        if family in ops.CONSTANT_FAMILIES:
            assert not ops.specs([family]) and len(two) == 2 * len(every) and {"1", "2"} <= {a for s in two for a in s.args}, family
        else:
            assert two == every == ops.specs([family]), family


def test_specs_by_op_name_list_only_what_each_op_needs():
    """ops.specs(ops=...) names each op's own modules: one per dtype for the norm and quant ops (each
    exporting that op alone), the shared module for the others; every public op is covered."""

    one = ops.specs(ops=["per_token_quant_fp8"], dtypes=["bfloat16"])
    assert [(s.name, s.args[1:], [w[0] for w in s.cuda_wrappers]) for s in one] == [("quant_per_token_quant", ("bf16_t",), ["per_token_quant"])]
    both = ops.specs(ops=["rmsnorm", "fused_inplace_qknorm", "transfer_kv_one_layer", "transfer_kv_all_layers"], dtypes=["float16"])
    assert [s.name for s in both] == ["norm_rmsnorm", "norm_qknorm", "kv_transfer"]
    every = ops.specs(ops=list(ops.OPS), constants=[1])
    assert set(every) == set(ops.specs(constants=[1])), "the ops, all named, need what every family needs"
    assert {s.name for s in every} >= {f"norm_{op}" for op in ops.norm._FAMILY.params} | {f"quant_{op}" for op in ops.quant._FAMILY.params}
    with pytest.raises(ValueError, match="unknown op rms_norm"):
        ops.specs(ops=["rms_norm"])


def test_the_norm_group_quant_ops_build_a_module_per_group_size():
    """rmsnorm_group_quant_fp8 and fused_add_rmsnorm_group_quant_fp8 build a module per scale format, rounding and
    group size, each exporting that group size's and rounding's instantiation of its C++ member template (a first
    call compiles one group size's kernels); warmup and prebuild (ops.specs()) cover them all."""
    specs = ops.specs(ops=["rmsnorm_group_quant_fp8", "fused_add_rmsnorm_group_quant_fp8"], dtypes=["bfloat16"])
    expected = [(f"quant_{op}{ue8m0}{suffix}_g{g}", f"jitkern_quant::QuantOps<bf16_t>::{op}{ue8m0}<{g}, device::quant::Rounding::{r}>")
                for op in ("rmsnorm_group_quant", "fused_add_rmsnorm_group_quant") for ue8m0 in ("", "_ue8m0")
                for suffix, r in (("", "kExact"), ("_sglang", "kSglang")) for g in (64, 128)]
    assert [(s.name, *(w[1] for w in s.cuda_wrappers)) for s in specs] == expected
    assert all(s.cuda_wrappers[0][0] == s.name.removeprefix("quant_") for s in specs)
    assert set(specs) <= set(ops.specs())


def test_parameter_lists_give_the_wrappers_names():
    """An export's parameters are written once, typed as in a torch schema or not; its wrapper names them."""
    assert param_names("Tensor(a!) input, Tensor(b!)? v_dst, Tensor? scale, float eps") == ("input", "v_dst", "scale", "eps")
    assert param_names("input, eps") == ("input", "eps") and param_names("") == ()
    assert wrapper("rmsnorm", "NormOps<fp16_t>::rmsnorm", "Tensor input, float eps") == ("rmsnorm", "NormOps<fp16_t>::rmsnorm", "input, eps")
    assert wrapper("stream_mem_ops_available", "ns::available", "") == ("stream_mem_ops_available", "ns::available")
    norm = ops.specs(ops=["fused_add_rmsnorm"], dtypes=["bfloat16"])[0]
    assert norm.cuda_wrappers == (("fused_add_rmsnorm", "jitkern_norm::NormOps<bf16_t>::fused_add_rmsnorm", "input, residual, weight, eps"),)


def test_a_torch_op_of_an_export_calls_the_function_by_its_parameter_names():
    """A torch op that takes an export's arguments calls the declared function with them: positionally where
    the function has them in that order (the function itself when it returns nothing), by keyword where not."""
    calls = []

    def in_order(a, b, *, c=0) -> None:
        calls.append((a, b, c))

    def reordered(b, a=0, *, c=0):
        calls.append((a, b, c))
        return "a result the torch op (-> ()) must not return"

    assert _calling(in_order, ("a", "b")) is in_order
    assert _calling(in_order, ("a", "b", "c"))(1, 2, 3) is None and calls[-1] == (1, 2, 3)
    assert _calling(reordered, ("a", "b", "c"))(1, 2, 3) is None and calls[-1] == (1, 2, 3)
    assert _calling(reordered, ("b", "a"))(4, 5) is None and calls[-1] == (5, 4, 0)
    assert list(inspect.signature(_calling(reordered, ("a", "b", "c"))).parameters) == ["a", "b", "c"]  # the schema's, as a lambda's
    with pytest.raises(TypeError, match=r"in_order\(\) has no parameter d of its torch op"):
        _calling(in_order, ("a", "d"))


class _Source:
    """A stand-in source recording what the family asks of it."""

    def __init__(self, params, calls, DTYPES=None):
        self.params, self.calls = params, calls
        if DTYPES:
            self.DTYPES = DTYPES

    def specs(self, exports, dtypes, constants):
        self.calls.append(("specs", exports, dtypes, constants))
        return [f"{e}:{dtypes}" for e in (exports or self.params)]

    def warmup(self, exports, dtypes, constants):
        self.calls.append(("warmup", exports, dtypes, constants))


def test_a_family_builds_what_its_declared_ops_need():
    """specs and warmup ask each source for the exports the wanted ops declared (in order, each once), and
    all of a source's for every op; a declaration naming an export no source has, or a torch op whose
    export has a parameter the function lacks, fails where it is made."""
    calls = []
    per_dtype, single = _Source({"x": "Tensor a", "y": "Tensor a, int n"}, calls, DTYPES=("float16",)), _Source({"z": "flag"}, calls)
    family = Family(per_dtype, single, helpers=("helper",))

    @family.op("x", "y")
    def first(a, n=0):
        pass

    @family.op("y", "z")
    def second(a):
        pass

    assert list(family.ops) == ["first", "second"] and family.ops["second"].exports == ("y", "z") and family.dtypes == ("float16",)
    assert Family(single).dtypes is None
    assert family.specs(["second", "first"], ["float16"], ()) == ["y:['float16']", "x:['float16']", "z:['float16']"]
    assert calls == [("specs", ["y", "x"], ["float16"], ()), ("specs", ["z"], ["float16"], ())]
    calls.clear()
    family.warmup(None, ("float16",), (3,))
    assert calls == [("warmup", None, ("float16",), (3,)), ("warmup", None, ("float16",), (3,))]
    with pytest.raises(TypeError, match="no source of the family exports w"):
        family.op("x", "w")
    with pytest.raises(TypeError, match=r"third\(\) has no parameter n of its torch op"):
        @family.op("y", torch=(TorchOp("third_out", export="y"),))
        def third(a):
            pass
    with pytest.raises(TypeError, match=r"torch op fourth_out: the parameters of export z need their types \('flag'\)"):
        @family.op("z", torch=(TorchOp("fourth_out", export="z"),))
        def fourth(flag):
            pass
    with pytest.raises(TypeError, match="give schema or export"):
        TorchOp("both", "(Tensor a) -> ()", export="y")


def _shown(fn) -> str:
    """How docs/ops.md shows a call of `fn`: its name and parameters, defaults as written in Python."""
    def value(v):
        return f'"{v}"' if isinstance(v, str) else re.sub(r"e-0(\d)", r"e-\1", repr(v))

    parts, star = [], False
    for p in inspect.signature(fn.__init__ if inspect.isclass(fn) else fn).parameters.values():
        if p.name == "self":
            continue
        if p.kind == p.VAR_KEYWORD:
            parts.append(f"**{p.name}")
            continue
        if p.kind == p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        parts.append(p.name if p.default is p.empty else f"{p.name}={value(p.default)}")
    return f"{fn.__name__}({', '.join(parts)})"


def test_the_op_table_shows_every_op_with_its_signature():
    """docs/ops.md's op table names every op of jitkern.ops, and where it shows an op's call, it is the op's
    signature exactly; the table names no op that is not there."""
    table = [line for line in (REPO / "docs" / "ops.md").read_text().splitlines() if line.startswith("| `")]
    text = "\n".join(table)
    missing = [op for op in ops.OPS if f"`{op}`" not in text and f"`{op}(" not in text]
    assert not missing, f"docs/ops.md's op table does not name {missing}"
    wrong = []
    for line in table:
        shown = line.split(" | ")[0]
        for name in re.findall(r"`(\w+)\(", shown):
            if name in ops.OPS:
                call = _shown(getattr(ops, name))
                if f"`{call}`" not in shown:
                    wrong.append(f"{call}\n  shown: {shown}")
        first = re.match(r"\| `(\w+)\(", line).group(1)
        assert first in ops.OPS, f"docs/ops.md's op table shows {first}, which jitkern.ops does not have"
    assert not wrong, "docs/ops.md shows these ops otherwise than their signatures:\n" + "\n".join(wrong)


def test_every_export_names_the_parameters_of_its_cpp_entry_point():
    """An export's declared parameters are its C++ entry point's, in order (they name the arguments in errors
    and in the torch schemas built from them): read from the definition in the module's csrc/ file."""
    wrong = []
    for spec in dict.fromkeys(ops.specs(constants=[1])):
        text = "\n".join((REPO / "csrc" / f).read_text() for f in spec.cuda_files)
        for export, expression, *names in spec.cuda_wrappers:
            declared = param_names(names[0]) if names else ()
            function = re.sub(r"<[^<>]*>", "", expression).split("::")[-1]
            definitions = re.findall(r"\b" + function + r"\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\)\s*(?:const\s*)?(?:noexcept\s*)?\{", text)
            defined = [tuple(re.sub(r"\s*=.*$", "", p).split()[-1].lstrip("*&") for p in d.split(",") if p.strip()) for d in definitions]
            if declared not in defined:
                wrong.append(f"{spec.name}.{export}: declared {declared}, C++ {function} has {defined}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.torch
def test_an_op_that_writes_and_returns_nothing_survives_compile():
    """define_op keeps an op that writes no argument and returns nothing (a stream wait): graphs compiled
    through functionalization (aot_eager) and lowered by inductor still call it, on the tensor passed (not on a
    copy); stream_wait_value is declared so, its flag only read."""
    import torch

    import jitkern.ops.wait_value  # noqa: F401  (registers torch.ops.jitkern.stream_wait_value)
    from jitkern._torch import define_op

    calls = []
    define_op("jitkern_test::ping", "(Tensor flag, int value) -> ()", lambda flag, value: calls.append((flag.data_ptr(), value)))

    def step(x, flag):
        torch.ops.jitkern_test.ping(flag, 3)
        return x * 2

    flag = torch.zeros(1, dtype=torch.int32)
    with torch._inductor.config.patch(fx_graph_cache=False), torch._functorch.config.patch(enable_autograd_cache=False):
        for backend in ("aot_eager", "inductor"):
            torch._dynamo.reset()
            calls.clear()
            assert torch.equal(torch.compile(step, backend=backend, fullgraph=True)(torch.ones(4), flag), torch.full((4,), 2.0))
            assert calls == [(flag.data_ptr(), 3)], backend
    wait = torch.ops.jitkern.stream_wait_value.default
    assert not wait._schema.is_mutable and wait in torch.fx.node._side_effectful_functions
