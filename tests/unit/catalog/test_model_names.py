"""Model names as users write them resolve to a catalog architecture plus a stated quantization."""

import pytest

from vidur_fast.catalog import get_model
from vidur_fast.catalog.names import resolve_model_name, stated_quantization
from vidur_fast.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "catalog", "quant"),
    [
        ("nvidia/Llama-3.1-8B-Instruct-FP8", "meta-llama/Llama-3.1-8B", "fp8"),
        ("meta-llama/Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B", ""),
        ("meta-llama/Llama-3.1-70B-Instruct-FP8", "meta-llama/Llama-3.1-70B", "fp8"),
        ("nvidia/Llama-3.1-70B-Instruct-NVFP4", "meta-llama/Llama-3.1-70B", "nvfp4"),
        ("nvidia/Qwen3-32B-NVFP4", "Qwen/Qwen3-32B", "nvfp4"),
        ("Qwen/Qwen3-32B-FP8", "Qwen/Qwen3-32B", "fp8_block"),
        ("Qwen/Qwen3-32B", "Qwen/Qwen3-32B", ""),
        ("qwen3-32b", "Qwen/Qwen3-32B", ""),
        ("meta-llama/Meta-Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B", ""),
        ("neuralmagic/Meta-Llama-3.1-70B-Instruct-FP8-dynamic", "meta-llama/Llama-3.1-70B", "fp8"),
        ("meta-llama/Llama-2-7b-chat-hf", "meta-llama/Llama-2-7b-hf", ""),
        ("nvidia/Llama-3.3-70B-Instruct-FP8", "meta-llama/Llama-3.1-70B", "fp8"),
        ("nvidia/Llama-3.3-70B-Instruct-FP4", "meta-llama/Llama-3.1-70B", "nvfp4"),
    ],
)
def test_resolves(name, catalog, quant):
    r = resolve_model_name(name)
    assert (r.catalog_name, r.quantization) == (catalog, quant)
    assert get_model(name).name == catalog
    assert stated_quantization(name) == quant


def test_unknown_lists_close_names_on_one_line():
    with pytest.raises(ConfigError) as exc:
        get_model("meta-llama/Llama-3.1-405B-Instruct-FP8")
    msg = str(exc.value)
    assert "\n" not in msg
    assert "unknown model 'meta-llama/Llama-3.1-405B-Instruct-FP8'" in msg
    assert "closest:" in msg and "meta-llama/Llama-3.1-70B" in msg


def test_unknown_without_close_names_lists_catalog():
    with pytest.raises(ConfigError, match="available: .*Qwen/Qwen3-32B"):
        resolve_model_name("zzzz")
    assert stated_quantization("zzzz") == ""


def test_cli_unknown_model_exits_2(capsys, tmp_path):
    from vidur_fast.commands.main import main

    rc = None
    try:
        rc = main(
            [
                "simulate",
                "--cluster.model",
                "nvidia/Llama-3.1-9B-FP8",
                "--output.dir",
                str(tmp_path / "r"),
            ]
        )
    except SystemExit as exc:
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err
    assert "closest:" in err and "Traceback" not in err


def test_device_names_are_case_insensitive_and_misspellings_get_suggestions():
    import pytest

    from vidur_fast.catalog import get_device, get_node
    from vidur_fast.errors import ConfigError

    assert get_device("H100").name == "h100" and get_node("H100_DGX").name == "h100_dgx"
    with pytest.raises(
        ConfigError, match="cluster.device: unknown device 'h10'; did you mean h100"
    ):
        get_device("h10")
