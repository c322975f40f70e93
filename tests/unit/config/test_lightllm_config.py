"""LightLLM configuration: kernel parameters, up-front rejections, Vidur flag mapping."""

import numpy as np
import pytest
from vidur_fast.kernels.codes import SchedPolicy

from vidur_fast.catalog import get_device, get_model
from vidur_fast.config.sim import ClusterConfig, LightLLMScheduler, SimConfig
from vidur_fast.config.validate import validate_config
from vidur_fast.config.vidur_flags import config_from_vidur_args
from vidur_fast.errors import ConfigError
from vidur_fast.params.setup import REJECT_KV_CAPACITY, REJECT_MAX_LEN, build_setup, rejection_codes

MODEL = "meta-llama/Meta-Llama-3-8B"


def _setup(sched, **cluster):
    cfg = SimConfig(cluster=ClusterConfig(model=MODEL, **cluster), scheduler=sched)
    validate_config(cfg)
    return build_setup(cfg, get_model(MODEL), get_device("h100"))


def test_lightllm_params_count_kv_in_tokens():
    s = _setup(LightLLMScheduler(max_tokens_in_batch=2048, max_waiting_iters=7))
    p = s.params
    assert p.policy == SchedPolicy.LIGHTLLM
    assert p.block_size == 1 and p.pp == 1
    assert p.max_tokens_in_batch == 2048 and p.max_waiting_iters == 7
    assert p.batch_size_cap == p.batch_size_cap_per_stage == 128
    # the request-slot planner at block size 1: 4096 tokens per slot
    assert p.usable_blocks == s.plan.num_blocks and p.usable_blocks % 4096 == 0
    # timing rows are the 16-token block profiles
    assert s.profile_block_size == 16


def test_lightllm_rejects_requests_that_could_never_run():
    s = _setup(LightLLMScheduler(num_blocks=1000, max_tokens_in_batch=500))
    prompt = np.array([100, 900, 600, 999, 996])
    decode = np.array([10, 100, 1, 1, 2])
    codes = rejection_codes(prompt, decode, s)
    # alone: 900 + 1 + 98 = 999 < 1000 fits; 999 + 1 >= 1000 does not
    assert list(codes) == [0, REJECT_MAX_LEN, REJECT_MAX_LEN, REJECT_MAX_LEN, REJECT_MAX_LEN]
    s2 = _setup(LightLLMScheduler(num_blocks=1000, max_tokens_in_batch=4096))
    codes = rejection_codes(prompt, decode, s2)
    assert list(codes) == [0, 0, 0, REJECT_KV_CAPACITY, 0]


@pytest.mark.parametrize(
    "sched,cluster,field",
    [
        (LightLLMScheduler(block_size=16), {}, "scheduler.block_size"),
        (LightLLMScheduler(max_waiting_iters=0), {}, "scheduler.max_waiting_iters"),
        (LightLLMScheduler(max_tokens_in_batch=0), {}, "scheduler.max_tokens_in_batch"),
        (LightLLMScheduler(batch_size_cap=0), {}, "scheduler.batch_size_cap"),
        (LightLLMScheduler(num_blocks=0), {}, "scheduler.num_blocks"),
        (LightLLMScheduler(), {"pp": 2}, "cluster.pp"),
    ],
)
def test_bad_lightllm_settings_name_the_field(sched, cluster, field):
    with pytest.raises(ConfigError, match=field):
        _setup(sched, **cluster)


def test_vidur_lightllm_flags_map_to_the_scheduler():
    cfg = config_from_vidur_args(
        [
            "--replica_scheduler_config_type",
            "lightllm",
            "--lightllm_scheduler_config_max_tokens_in_batch",
            "2048",
            "--lightllm_scheduler_config_max_waiting_iters",
            "5",
            "--lightllm_scheduler_config_batch_size_cap",
            "64",
            "--lightllm_scheduler_config_num_blocks",
            "50000",
        ]
    )
    assert cfg.scheduler == LightLLMScheduler(
        batch_size_cap=64,
        max_tokens_in_batch=2048,
        max_waiting_iters=5,
        block_size=1,
        num_blocks=50000,
        max_tokens=4096,
    )


def test_vidur_lightllm_block_size_other_than_one_is_refused():
    cfg = config_from_vidur_args(
        ["--replica_scheduler_config_type", "lightllm", "--lightllm_scheduler_config_block_size"]
        + ["16"]
    )
    with pytest.raises(ConfigError, match="block_size"):
        validate_config(cfg)
