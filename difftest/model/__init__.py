"""The case model: a case (case), its inputs (generate), how cases are drawn (strategies), narrowed (where) or
pinned to a released model (presets)."""

# The ops a case can be of. Here, not in case.py, so that the command line can name them without importing numpy:
# a usage error answers before any numerics load.
OPS = ("routing", "quant", "moe", "trtllm_ops")
