"""The float64 routing model the comparator reads (spec.routing: ideal_keys, ideal_scores and route(ideal=True,
ids=...)) on drawn routing cases of every method: the selected scores normalized and scaled are the ideal
route's weights at forced ids; forcing the ideal route's own ids changes nothing; the keys rank as the ideal
route selects (its ids are a top-k of ideal_keys)."""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from difftest.model import generate, strategies
from spec import routing as sr


def _case_inputs(data):
    case = data.draw(strategies.cases(op="routing"), label="case")
    return case.config, generate.inputs(case)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_ideal_route_is_the_scores_normalized(data):
    c, inputs = _case_inputs(data)
    kw = {**c.route_kwargs(), "ideal": True}
    x, b = inputs["logits"], inputs.get("bias")
    own = sr.route(x, b, **kw)
    k = c.top_k
    ids = own.ids[:, :k].astype(np.int64)
    forced = sr.route(x, b, **{**kw, "ids": ids})
    np.testing.assert_array_equal(forced.weights, own.weights)
    s = sr.ideal_scores(x, method=c.method, ids=ids)
    rsf = 1.0 if c.routed_scaling_factor is None else c.routed_scaling_factor
    with np.errstate(invalid="ignore", divide="ignore"):
        if sr.renormalizes(c.method, c.renormalize):
            total = np.zeros(len(s))
            for j in range(k):  # left to right, as the spec sums
                total = total + s[:, j]
            s = s / (total[:, None] + c.eps)
    masked = c.method == "deepseek_v2" and c.n_group > 1  # weights from q: mask values where groups drop
    if not masked:
        np.testing.assert_array_equal(own.weights[:, :k], s * rsf)
    keys, gkeys = sr.ideal_keys(x, b, method=c.method, n_group=c.n_group,
                                group_score=sr.group_rule(c.method, "method", b is not None))
    assert (gkeys is None) == (c.n_group == 1)
    if c.n_group == 1:  # the selected keys are the largest (NaN last): no rejected key above a selected one
        chosen = np.take_along_axis(keys, ids, axis=-1)
        rest = keys.copy()
        np.put_along_axis(rest, ids, -np.inf, axis=-1)
        with np.errstate(invalid="ignore"):
            bad = (np.nan_to_num(rest, nan=-np.inf).max(axis=-1, initial=-np.inf)
                   > np.nan_to_num(chosen, nan=-np.inf).min(axis=-1, initial=np.inf))
        assert not bad.any(), (keys[bad][:1], ids[bad][:1])
