"""classification.analysis.degradation: every net and option is checked before anything is built or trained."""

import pytest

from classification.analysis.degradation import run_degradation
from classification.engine.trainer import ClsConfig


@pytest.mark.parametrize("models, message", [
    (["cifar_plain20", "vgg16"], "vgg16 has no option 'preact'"),  # a family without pre-activation units
    (["cifar_plain20", "cifar_plain8"], "unknown model 'cifar_plain8'"),
])
def test_a_net_that_cannot_be_built_with_the_recipe_is_named_before_any_net_trains(tmp_path, models, message):
    base = ClsConfig(dataset="embedded", iterations=4, model_options={"preact": True})
    with pytest.raises(ValueError, match=message):
        run_degradation(models, base, tmp_path / "deg")
    assert not (tmp_path / "deg").exists()
