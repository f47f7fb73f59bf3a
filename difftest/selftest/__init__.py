"""The tester's self-test, beside the flow: seeded mutants of impls/torch_eager (mutants), models of public bugs
(bug_models, known_bugs) and correct implementations that differ only by a declared tie order (tie_orders)."""
