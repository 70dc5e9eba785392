"""jitkern's kernels in a `transformers` model, in one call: `apply(model)` swaps the forward of every
RMSNorm of the Llama, Qwen2, Qwen3 and Mistral families for `jitkern.ops.rmsnorm`; `revert(model)`
restores them. transformers itself is not imported (the modules are recognised by their class names).

- Eager, the patched norms run jitkern's kernel. Under torch.compile they run their original forward,
  so that Inductor fuses them with the residual add around them (an opaque custom op would stop that,
  and the compiled model would be slower); the compiled patched model is the compiled unpatched model.
- `exact_rounding=True` keeps transformers' rounding order (the normalised value is rounded to the
  input's dtype before the weight multiplies it), as two steps: the kernel with a weight of ones, then
  the multiplication. The default rounds once, after the weight (one kernel, and closer to the exact
  result).
- A norm whose weight dtype differs from its input's (fp32 weights under autocast) or whose input is
  not on a CUDA device runs its original forward.
"""

from __future__ import annotations

import types
import warnings

from .._torch import require_torch, torch

# transformers' RMSNorm classes with `weight` and `variance_epsilon` and out = weight * normalised(x).
RMSNORM_CLASSES = ("LlamaRMSNorm", "Qwen2RMSNorm", "Qwen3RMSNorm", "Qwen3MoeRMSNorm", "MistralRMSNorm", "MixtralRMSNorm")
_ORIGINAL = "_jitkern_original_forward"


def _patched_forward(exact_rounding: bool):
    require_torch()
    from ..ops import rmsnorm

    def forward(self, hidden_states):
        weight = self.weight
        if (torch.compiler.is_compiling() or not hidden_states.is_cuda or weight.dtype != hidden_states.dtype
                or hidden_states.dtype not in (torch.float16, torch.bfloat16, torch.float32)):
            return getattr(self, _ORIGINAL)(hidden_states)
        if exact_rounding:
            ones = getattr(self, "_jitkern_ones", None)
            if ones is None or ones.shape != weight.shape or ones.dtype != weight.dtype or ones.device != weight.device:
                ones = torch.ones_like(weight)
                self._jitkern_ones = ones
            return weight * rmsnorm(hidden_states, ones, eps=self.variance_epsilon)
        return rmsnorm(hidden_states, weight, eps=self.variance_epsilon)

    return forward


def apply(model, *, exact_rounding: bool = False) -> int:
    """Patches every recognised RMSNorm of `model` (a torch.nn.Module) in place; returns how many. Applying
    twice changes nothing more (a second call with another `exact_rounding` switches the mode). A model
    with none is left as it is, with a warning naming its norm classes, if any."""
    require_torch()
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"apply(): model must be a torch.nn.Module, got {type(model).__name__}")
    forward = _patched_forward(bool(exact_rounding))
    patched, unknown = 0, set()
    for module in model.modules():
        name = type(module).__name__
        if name in RMSNORM_CLASSES and hasattr(module, "weight") and hasattr(module, "variance_epsilon"):
            if _ORIGINAL not in module.__dict__:
                module.__dict__[_ORIGINAL] = module.forward
            module.forward = types.MethodType(forward, module)
            patched += 1
        elif "norm" in name.lower() and "RMS" in name:
            unknown.add(name)
    if not patched:
        warnings.warn(f"jitkern.integrations.transformers.apply: no RMSNorm of a supported family in {type(model).__name__} "
                      f"(supported: {', '.join(RMSNORM_CLASSES)}{'; found ' + ', '.join(sorted(unknown)) if unknown else ''}); "
                      "the model is left unpatched", stacklevel=2)
    return patched


def revert(model) -> int:
    """Restores every norm apply() patched; returns how many."""
    restored = 0
    for module in model.modules():
        original = module.__dict__.pop(_ORIGINAL, None)
        if original is not None:
            del module.forward  # the instance attribute: the class's forward applies again
            module.__dict__.pop("_jitkern_ones", None)
            restored += 1
    return restored
