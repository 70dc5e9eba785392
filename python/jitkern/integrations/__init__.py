"""Patching models of other libraries to run jitkern's kernels: `jitkern.integrations.transformers.apply(model)`."""
