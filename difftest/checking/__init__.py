"""Checking one case: the implementation registry (interface), the spec and torch adapters (impl_spec,
impl_torch), the verdicts (compare, driven by check) and the bias test over many cases (bias)."""
