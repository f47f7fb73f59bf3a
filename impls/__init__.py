"""Implementations under test: an independent torch eager implementation and FlashInfer adapters."""
