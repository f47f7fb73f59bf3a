"""Named recipes: valid, round-tripping, and the torch eager implementation's declaration equals the spec's row."""

import pytest

from impls.torch_eager.recipe import RECIPE
from spec.recipes import NAMED, Recipe


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
