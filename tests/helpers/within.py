"""The tests' check against a derived bound: difftest.checking.compare.elementwise, which also fails where the values
differ and the bound is not a finite number >= 0 (an infinite bound would pass anything: it compares nothing)."""

import numpy as np

from difftest.checking.compare import elementwise


def assert_within(what, got, want, bound):
    v = elementwise(what, np.asarray(got, np.float64), np.asarray(want, np.float64), bound, "test")
    assert v.ok, v.message
