"""The case model: a case (case), its inputs (generate), how cases are drawn (strategies), narrowed (where) or
pinned to a released model (presets)."""
