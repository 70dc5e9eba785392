"""jitkern's kernels in a `transformers` (5.x) model, in one call: `apply(model)` patches the modules of
the Llama, Qwen2, Qwen3 and Mistral families in place; `revert(model)` restores them. transformers itself
is not imported (the modules are recognised by their class names).

What runs jitkern's kernels, eager:
- Every RMSNorm (RMSNORM_CLASSES): `jitkern.ops.rmsnorm`.
- Every decoder layer (DECODER_LAYER_CLASSES): the residual add after attention and the
  post-attention norm are one `fused_add_rmsnorm`; so are the layer's last residual add and the norm
  that follows it (the next layer's input norm, or the model's final norm after the last layer). The
  layer leaves that normalised value on the next norm, which hands it out when it is called with the
  layer's output; the next layer then adds into that output in place instead of copying it. A patched
  layer's output is thus overwritten once it has been passed on to the next layer, as the model's own
  loop does. A layer input that did not come from the previous patched layer (the embeddings, a
  caller's tensor) is never written.
- Every gated MLP (MLP_CLASSES) with SiLU and no bias on gate_proj and up_proj: one GEMM with the gate
  and up weights as one matrix, then `jitkern.ops.silu_and_mul`, then down_proj. At its first call the
  MLP moves the two weights into one buffer (gate rows, then up rows) and points both parameters at
  their halves (`.data`; the Parameter objects stay), so the patch costs no memory and an in-place
  change of either weight is seen at once; a weight replaced since is moved again at the next call.
  `revert` gives each weight its own storage again (tensors that share a storage cannot be saved with
  safetensors).

What runs its original forward (`stats()` counts the calls by reason, and the `jitkern` logger says each
reason once, at INFO):
- Everything under torch.compile (Inductor fuses the original code with what surrounds it; an opaque
  custom op would stop that, and the compiled model would be slower): the compiled patched model is the
  compiled unpatched model.
- A module whose input is not a CUDA tensor of fp16, bf16 or fp32, or whose weights' dtype differs from
  it (fp32 weights under autocast); with grad enabled, a module whose input or parameters require grad.
- A decoder layer with forward hooks (or pre-hooks) on itself or any of its submodules, or
  with global module hooks: a hook may keep a tensor the fused path overwrites (transformers'
  `output_hidden_states` and `output_attentions` install such hooks the first time they are asked for,
  and they stay).

Not patched: attention and its rotary embedding. transformers calls its module-level
`apply_rotary_pos_emb` from inside each attention's forward (no per-module hook to swap), with cos and
sin already gathered per token in the activation dtype; jitkern's rope kernel takes positions and an fp32
cache by position, so patching it means replacing the whole attention forward (projections, KV cache
update, attention backend) for the rotation alone.

`exact_rounding=True` keeps transformers' rounding order: a norm's normalised value is rounded to the
input's dtype before the weight multiplies it (the kernel with a weight of ones, then the
multiplication), and the MLPs are left unpatched (transformers rounds the SiLU and then the product;
silu_and_mul rounds once, and a GEMM of the concatenated weights need not round as the two GEMMs do).
The residual adds round as transformers' do in either mode (fused_add_rmsnorm rounds the sum to the
input's dtype and normalises that rounded sum). Bit-equality with the unpatched model is still not
guaranteed: the kernels sum the squares in another order than torch's mean, which can move a
normalised value by one unit in the last place. The default mode rounds a norm once, after the weight
(one kernel, and closer to the exact result).
"""

from __future__ import annotations

import inspect
import logging
import types
import warnings

from .._torch import require_torch, torch

# transformers' RMSNorm classes with `weight` and `variance_epsilon` and out = weight * normalised(x).
RMSNORM_CLASSES = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "MistralRMSNorm", "MixtralRMSNorm")
# Decoder layers whose forward is x + attn(input_layernorm(x)), then h + mlp(post_attention_layernorm(h)).
DECODER_LAYER_CLASSES = ("LlamaDecoderLayer", "Qwen2DecoderLayer", "Qwen3DecoderLayer", "MistralDecoderLayer")
# Gated MLPs: down_proj(act_fn(gate_proj(x)) * up_proj(x)).
MLP_CLASSES = ("LlamaMLP", "Qwen2MLP", "Qwen3MLP", "MistralMLP")
_SILU_CLASSES = ("SiLUActivation", "SiLU")

_ORIGINAL = "_jitkern_original_forward"
_ONES = "_jitkern_ones"  # a norm's weight of ones (exact_rounding)
_NEXT_NORM = "_jitkern_next_norm"  # a layer's next norm (the next layer's input norm or the final norm)
_PRENORMED = "_jitkern_prenormed"  # on a norm: (the previous layer's output, its normalised value)
_ARG_NAMES = "_jitkern_arg_names"  # on a layer: the names of its original forward's positional arguments
_WATCHED = "_jitkern_watched"  # on a layer: itself and its submodules, whose hooks send it to its original forward
_ADDED = (_ORIGINAL, _ONES, _NEXT_NORM, _PRENORMED, _ARG_NAMES, _WATCHED)  # every attribute apply may add


# Why a patched module ran its original forward (or a module was left unpatched): stats() counts by these keys.
FALLBACK_REASONS = {
    "not_cuda": "its input is not on a CUDA device",
    "dtype": "its input is not float16, bfloat16 or float32",
    "weight_dtype": "its weights' dtype differs from its input's (fp32 weights under autocast?)",
    "grad": "grad is enabled and its input or parameters require grad (run under torch.no_grad() or torch.inference_mode())",
    "hooks": "forward hooks are installed on it, its submodules or all modules (output_hidden_states and output_attentions install them)",
    "mlp_changed": "its projections are no longer plain bias-free nn.Linear modules (an adapter wrapped them?)",
    "layer_returns_tuple": "its forward is not declared to return a tensor (transformers 4.x layers return a tuple), so apply() "
                           "left it unpatched; its norms and MLP are patched",
}
_log = logging.getLogger("jitkern.integrations.transformers")
_COUNTS: dict[str, int] = {}  # "kernel" (calls that ran jitkern's kernels) and FALLBACK_REASONS keys -> calls


def stats(reset: bool = False) -> dict[str, int]:
    """How many calls of patched modules ran jitkern's kernels ("kernel") and how many ran their original
    forward, by reason (FALLBACK_REASONS' keys; "layer_returns_tuple" counts modules apply() left unpatched).
    Calls under torch.compile are not counted. `reset`: start counting anew."""
    counts = dict(_COUNTS)
    if reset:
        _COUNTS.clear()
    return counts


def _fell_back(reason: str, module) -> None:
    """Counts a fallback; the first of each reason since the last reset is logged (INFO: the `jitkern` logger's default level)."""
    if reason not in _COUNTS:
        _log.info("transformers integration: %s runs its original forward: %s (stats() counts these calls)",
                  type(module).__name__, FALLBACK_REASONS[reason])
    _COUNTS[reason] = _COUNTS.get(reason, 0) + 1


def _ran_kernels() -> None:
    _COUNTS["kernel"] = _COUNTS.get("kernel", 0) + 1


def module_kind(module) -> str | None:
    """"norm", "layer" or "mlp" for a module apply() recognises by its class name and attributes, else None."""
    name = type(module).__name__
    if name in RMSNORM_CLASSES and hasattr(module, "weight") and hasattr(module, "variance_epsilon"):
        return "norm"
    if name in DECODER_LAYER_CLASSES and all(hasattr(module, a) for a in ("input_layernorm", "self_attn", "post_attention_layernorm", "mlp")):
        return "layer"
    if name in MLP_CLASSES and all(hasattr(module, a) for a in ("gate_proj", "up_proj", "down_proj", "act_fn")):
        return "mlp"
    return None


def positional_names(forward) -> tuple[str, ...] | None:
    """The names of `forward`'s arguments after the first (hidden_states) that a caller may pass by
    position, or None when its signature cannot be read or it does not return a tensor (a transformers
    4.x layer returns a tuple)."""
    try:
        signature = inspect.signature(forward)
    except (TypeError, ValueError):
        return None
    if signature.return_annotation not in ("torch.Tensor", getattr(torch, "Tensor", None)):
        return None
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(p.name for p in signature.parameters.values() if p.kind in kinds)[1:]


def _hooked(modules) -> bool:
    """Whether a forward hook could see a tensor that the fused path overwrites."""
    nn_module = torch.nn.modules.module
    return bool(getattr(nn_module, "_global_forward_hooks", None) or getattr(nn_module, "_global_forward_pre_hooks", None)) or \
        any(m._forward_hooks or m._forward_pre_hooks for m in modules)


def _fallback_reason(x, *weights) -> str | None:
    """Why the kernels may not run on input x with these weights (a FALLBACK_REASONS key), or None when they
    may (CUDA, a kernel dtype, weights of x's dtype, nothing for autograd to track); eager calls only."""
    if not x.is_cuda:
        return "not_cuda"
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return "dtype"
    if any(w.dtype != x.dtype for w in weights):
        return "weight_dtype"
    return "grad" if torch.is_grad_enabled() and (x.requires_grad or any(w.requires_grad for w in weights)) else None


def _gate_up_weight(gate, up):
    """gate's and up's weights as one [gate rows + up rows, hidden] view: where they are not already the
    two halves of one buffer, they are moved into one and both parameters point at their halves."""
    rows, hidden = gate.shape[0], gate.shape[1]
    adjacent = (gate.is_contiguous() and up.is_contiguous() and up.shape[1] == hidden and up.dtype == gate.dtype
                and up.untyped_storage().data_ptr() == gate.untyped_storage().data_ptr()
                and up.storage_offset() == gate.storage_offset() + gate.numel())
    if not adjacent:
        with torch.inference_mode(False), torch.no_grad():  # parameters must not become inference tensors
            fused = torch.cat([gate.detach(), up.detach()])
            gate.data, up.data = fused[:rows], fused[rows:]  # the old storages are freed with their last reference
    return gate.detach().as_strided((rows + up.shape[0], hidden), (hidden, 1))


def _separate_gate_up(mlp) -> None:
    """Gives gate's and up's weights their own storage again (undoes _gate_up_weight)."""
    gate, up = getattr(mlp.gate_proj, "weight", None), getattr(mlp.up_proj, "weight", None)
    if isinstance(gate, torch.Tensor) and isinstance(up, torch.Tensor) and gate.untyped_storage().data_ptr() == up.untyped_storage().data_ptr():
        with torch.inference_mode(False), torch.no_grad():
            gate.data, up.data = gate.detach().clone(), up.detach().clone()


def _take_prenormed(norm, x):
    """The normalised x that the previous layer left on `norm`, or None when it left none for x."""
    stash = norm.__dict__.pop(_PRENORMED, None)
    return stash[1] if stash is not None and stash[0] is x else None


def _patched_forwards(exact_rounding: bool) -> dict:
    """The patched forwards by module kind ("mlp" missing in exact_rounding mode)."""
    require_torch()
    from ..ops import act, norm as norm_ops

    def ones_like(norm):
        weight = norm.weight
        ones = norm.__dict__.get(_ONES)
        if ones is None or ones.shape != weight.shape or ones.dtype != weight.dtype or ones.device != weight.device:
            ones = norm.__dict__[_ONES] = torch.ones_like(weight)
        return ones

    def add_norm(norm, x, residual):
        """residual += x, returns norm(residual) (written into x)."""
        if exact_rounding:
            norm_ops.fused_add_rmsnorm(x, residual, ones_like(norm), norm.variance_epsilon)
            return norm.weight * x
        norm_ops.fused_add_rmsnorm(x, residual, norm.weight, norm.variance_epsilon)
        return x

    def norm_forward(self, hidden_states):
        if torch.compiler.is_compiling():
            return getattr(self, _ORIGINAL)(hidden_states)
        prenormed = _take_prenormed(self, hidden_states)
        if prenormed is not None:
            return prenormed
        reason = _fallback_reason(hidden_states, self.weight)
        if reason is not None:
            _fell_back(reason, self)
            return getattr(self, _ORIGINAL)(hidden_states)
        _ran_kernels()
        if exact_rounding:
            return self.weight * norm_ops.rmsnorm(hidden_states, ones_like(self), eps=self.variance_epsilon)
        return norm_ops.rmsnorm(hidden_states, self.weight, eps=self.variance_epsilon)

    def layer_forward(self, hidden_states, *args, **kwargs):
        first, second = self.input_layernorm, self.post_attention_layernorm
        if torch.compiler.is_compiling():
            return getattr(self, _ORIGINAL)(hidden_states, *args, **kwargs)
        reason = _fallback_reason(hidden_states, first.weight, second.weight) or \
            ("grad" if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()) else None) or \
            ("hooks" if _hooked(self.__dict__[_WATCHED]) else None)
        if reason is not None:
            _fell_back(reason, self)
            return getattr(self, _ORIGINAL)(hidden_states, *args, **kwargs)
        _ran_kernels()
        kwargs.update(zip(self.__dict__[_ARG_NAMES], args))
        normed = _take_prenormed(first, hidden_states)
        owned = normed is not None  # hidden_states is the previous patched layer's own sum: ours to write
        if not owned:
            normed = first(hidden_states)
        attn, _ = self.self_attn(hidden_states=normed, **kwargs)
        if owned:
            residual, normed = hidden_states, add_norm(second, attn, hidden_states)
        else:  # the sum goes to attention's fresh output, so that the caller's tensor stays as it was
            residual = attn.add_(hidden_states)
            normed = second(residual)
        out = self.mlp(normed)
        following = self.__dict__.get(_NEXT_NORM)
        if following is None or following.weight.dtype != residual.dtype:
            return residual.add_(out)
        following.__dict__[_PRENORMED] = (residual, add_norm(following, out, residual))
        return residual

    def mlp_forward(self, x):
        if torch.compiler.is_compiling():
            return getattr(self, _ORIGINAL)(x)
        if not _mlp_fusable(self):  # checked again: adapters may have wrapped the projections since apply()
            _fell_back("mlp_changed", self)
            return getattr(self, _ORIGINAL)(x)
        gate, up = self.gate_proj.weight, self.up_proj.weight
        reason = _fallback_reason(x, gate, up)
        if reason is not None:
            _fell_back(reason, self)
            return getattr(self, _ORIGINAL)(x)
        _ran_kernels()
        return self.down_proj(act.silu_and_mul(torch.nn.functional.linear(x, _gate_up_weight(gate, up))))

    forwards = {"norm": norm_forward, "layer": layer_forward}
    if not exact_rounding:
        forwards["mlp"] = mlp_forward
    return forwards


def _mlp_fusable(mlp) -> bool:
    linear = torch.nn.Linear
    return (type(mlp.act_fn).__name__ in _SILU_CLASSES and type(mlp.gate_proj) is linear and type(mlp.up_proj) is linear
            and mlp.gate_proj.bias is None and mlp.up_proj.bias is None)


def _unpatch(module) -> bool:
    original = module.__dict__.get(_ORIGINAL)
    if original is not None and module_kind(module) == "mlp":
        _separate_gate_up(module)
    for name in _ADDED:
        module.__dict__.pop(name, None)
    if original is None:
        return False
    del module.forward  # the instance attribute: the class's forward applies again
    return True


def apply(model, *, exact_rounding: bool = False) -> int:
    """Patches every recognised RMSNorm, decoder layer and gated MLP of `model` (a torch.nn.Module) in
    place; returns how many modules it patched. Applying twice changes nothing more (a second call with
    another `exact_rounding` switches the mode; another call after replacing submodules of a patched
    model brings the patch up to date). A model with no RMSNorm of a supported family is left as it is,
    with a warning naming its norm classes, if any."""
    require_torch()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"apply(): model must be a torch.nn.Module, got {type(model).__name__}")
    forwards = _patched_forwards(bool(exact_rounding))
    patched, unknown = [], set()
    for module in model.modules():
        kind = module_kind(module)
        if kind == "layer":
            names = positional_names(module.__dict__.get(_ORIGINAL, module.forward))
            if names is None:
                _fell_back("layer_returns_tuple", module)
                kind = None
        if kind == "mlp" and not _mlp_fusable(module):
            kind = None
        if kind is None or kind not in forwards:
            _unpatch(module)
            if kind is None and "norm" in type(module).__name__.lower() and "RMS" in type(module).__name__:
                unknown.add(type(module).__name__)
            continue
        if _ORIGINAL not in module.__dict__:
            module.__dict__[_ORIGINAL] = module.forward
        if kind == "layer":
            module.__dict__[_ARG_NAMES] = names
            module.__dict__[_WATCHED] = tuple(module.modules())
        module.__dict__.pop(_PRENORMED, None)
        module.forward = types.MethodType(forwards[kind], module)
        patched.append(module)
    _link_layers(model)
    if not any(module_kind(m) == "norm" for m in patched):
        warnings.warn(f"jitkern.integrations.transformers.apply: no RMSNorm of a supported family in {type(model).__name__} "
                      f"(supported: {', '.join(RMSNORM_CLASSES)}{'; found ' + ', '.join(sorted(unknown)) if unknown else ''}); "
                      "the model is left unpatched", stacklevel=2)
    return len(patched)


def _link_layers(model) -> None:
    """Gives each patched decoder layer of a `layers` list its next norm: the next layer's input norm, or
    after the last layer the `norm` beside the list (the model's final norm), where that is patched."""
    def patched(module, kind):
        return module is not None and module_kind(module) == kind and _ORIGINAL in module.__dict__

    for parent in model.modules():
        layers = getattr(parent, "layers", None)
        if not isinstance(layers, torch.nn.ModuleList):
            continue
        final = getattr(parent, "norm", None)
        for i, layer in enumerate(layers):
            if not patched(layer, "layer"):
                continue
            following = layers[i + 1].input_layernorm if i + 1 < len(layers) and patched(layers[i + 1], "layer") else \
                final if i + 1 == len(layers) else None
            if patched(following, "norm"):
                layer.__dict__[_NEXT_NORM] = following
            else:
                layer.__dict__.pop(_NEXT_NORM, None)


def revert(model) -> int:
    """Restores every module apply() patched and drops what it added (the fused MLP weights included);
    returns how many modules it restored."""
    return sum(_unpatch(module) for module in model.modules())
