"""Executable specification of MoE inference layers, in numpy and the standard library only."""
