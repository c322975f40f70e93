"""Worked values for the memory planners."""

import pytest

from vidur_fast.catalog import get_device, get_model
from vidur_fast.errors import ConfigError
from vidur_fast.params.memory import plan_request_slots, plan_tokens

SLOT_CASES = [
    # model, device, tp, pp, max_tokens, params/device, max_batch, num_blocks
    ("meta-llama/Llama-2-7b-hf", "a100", 1, 1, 4096, 6_476_005_376, 29, 7_424),
    ("meta-llama/Meta-Llama-3-8B", "a100", 1, 1, 4096, 6_979_321_856, 118, 30_208),
    ("meta-llama/Meta-Llama-3-8B", "a100", 1, 1, 16384, 6_979_321_856, 29, 29_696),
    ("meta-llama/Llama-2-70b-hf", "a100", 4, 1, 4096, 17_112_760_320, 128, 32_768),
    ("meta-llama/Llama-2-70b-hf", "a100", 2, 2, 4096, 17_112_760_320, 64, 32_768),
    ("codellama/CodeLlama-34b-Instruct-hf", "a100", 2, 1, 4096, 16_609_443_840, 109, 27_904),
    ("Qwen/Qwen-72B", "h100", 4, 1, 4096, 17_448_304_640, 15, 3_840),
    ("microsoft/phi-2", "a40", 1, 1, 2048, 2_516_582_400, 57, 7_296),
]


@pytest.mark.parametrize("name,dev,tp,pp,mt,params,max_batch,blocks", SLOT_CASES)
def test_request_slot_planner_matches_worked_values(
    name, dev, tp, pp, mt, params, max_batch, blocks
):
    model = get_model(name)
    assert model.params_per_device(tp, pp) == params
    plan = plan_request_slots(model, get_device(dev), tp, pp, 16, mt)
    assert plan.max_batch_size == max_batch
    assert plan.num_blocks == blocks


@pytest.mark.parametrize(
    "name,dev,tp,blocks",
    [
        ("meta-llama/Llama-2-7b-hf", "a100", 1, 7_672),
        ("meta-llama/Meta-Llama-3-8B", "h100", 1, 30_208),
        ("meta-llama/Meta-Llama-3-70B", "h100", 4, 32_870),
    ],
)
def test_token_planner_matches_worked_values(name, dev, tp, blocks):
    plan = plan_tokens(get_model(name), get_device(dev), tp, 1, 16)
    assert plan.num_blocks == blocks


def test_weights_that_do_not_fit_are_a_config_error():
    with pytest.raises(ConfigError, match="raise tp/pp"):
        plan_tokens(get_model("meta-llama/Llama-2-70b-hf"), get_device("a100"), 1, 1, 16)


def test_tp_must_divide_heads_and_pp_layers():
    m = get_model("meta-llama/Meta-Llama-3-8B")
    with pytest.raises(ConfigError, match="cluster.tp"):
        m.check_parallelism(3, 1)
    with pytest.raises(ConfigError, match="cluster.pp"):
        m.check_parallelism(1, 5)
