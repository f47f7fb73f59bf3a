"""Named recipes: valid, round-tripping, and the torch eager implementation's declaration equals the spec's row."""

import pytest

from impls.torch_eager.recipe import RECIPE
from spec.recipes import NAMED, ROUTING_WEIGHT_FORMATS, Recipe


@pytest.mark.parametrize("path", sorted(RECIPE))
def test_torch_eager_declaration_is_the_named_recipe(path):
    declared = Recipe.from_dict(RECIPE[path])
    assert declared == NAMED[declared.name], f"impls/torch_eager/recipe.py[{path}] != spec.recipes.NAMED"


def test_named_recipes_round_trip():
    for name, recipe in NAMED.items():
        assert recipe.name == name and Recipe.from_dict(recipe.to_dict()) == recipe


def test_unknown_field_and_value_are_one_line_errors():
    with pytest.raises(ValueError, match="unknown Recipe fields"):
        Recipe.from_dict({"name": "x", "gemm_accumulator": "fp32"})
    with pytest.raises(ValueError, match="Recipe.gemm_acc"):
        Recipe(name="x", gemm_acc="fp16")


# A typo in any field: every field of Recipe, each with a value outside its list (issue 36: routing_weights, logits,
# bias and the stores were accepted and then every case was refused).
TYPOS = {"name": "", "requant_intermediate": "yes", "requant_group": 96, **{
    f: "bf61" for f in Recipe.__dataclass_fields__ if f not in ("name", "requant_intermediate", "requant_group")}}


@pytest.mark.parametrize("field", sorted(TYPOS))
def test_every_field_is_checked_at_construction(field):
    assert set(TYPOS) == set(Recipe.__dataclass_fields__)
    with pytest.raises(ValueError, match=f"Recipe.{field}") as e:
        Recipe(name="x", **{field: TYPOS[field]}) if field != "name" else Recipe(name="")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("fmt", ROUTING_WEIGHT_FORMATS)
def test_routing_weight_formats_are_all_routable(fmt):
    """Each declarable weight format is one the spec's routing writes (no recipe accepted and then refused)."""
    import numpy as np

    from spec.routing import route

    r = route(np.array([[0.0, 1.0]], np.float32), method="sigmoid", top_k=1,
              recipe=Recipe(name="x", routing_weights=fmt))
    assert r.weights.dtype == np.float32


@pytest.mark.parametrize("path", sorted(RECIPE))
def test_torch_cuda_recipe_is_the_named_flush_row(path):
    from difftest.checking.impl_torch import recipe_cuda

    class _Config:
        quant = path

    class _Case:
        op, config = "moe", _Config()

    cuda = recipe_cuda(_Case())
    assert cuda.subnormals == "flush" and cuda == NAMED[cuda.name]
    assert cuda.but(name=RECIPE[path]["name"], subnormals="keep") == Recipe.from_dict(RECIPE[path])
