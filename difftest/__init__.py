"""Differential tester: spec vs implementations, with derived error bounds."""
