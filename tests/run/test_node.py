"""What a node says about itself: parsed vendor-tool output, Ray resources, labels, `ray start`."""

from __future__ import annotations

import json
import subprocess

import pytest

from harness.run import node
from harness.run.node import GpuReading, NodeInventory
from harness.spec.catalog import Vendor

# `nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader,nounits`,
# recorded on a real H200 node.
NVIDIA_H200 = "NVIDIA H200, 143771, 580.159.04\n"
NVIDIA_8X_H100 = "".join("NVIDIA H100 80GB HBM3, 81559, 550.54.15\n" for _ in range(8))

# `amd-smi static --json`, ROCm 6.x layout (a list of GPUs), shortened.
AMD_SMI_LIST = json.dumps(
    [
        {
            "gpu": i,
            "asic": {"market_name": "AMD Instinct MI300X", "device_id": "0x74a1"},
            "vram": {"type": "HBM", "size": {"value": 196592, "unit": "MB"}},
            "driver": {"name": "amdgpu", "version": "6.7.0"},
        }
        for i in range(8)
    ]
)
# Newer amd-smi: the same list under "gpu_data".
AMD_SMI_GPU_DATA = json.dumps(
    {
        "gpu_data": [
            {
                "gpu": 0,
                "asic": {"market_name": "AMD Instinct MI325X"},
                "vram": {"size": {"value": 262128, "unit": "MB"}},
                "driver": {"name": "amdgpu", "version": "6.10.5"},
            }
        ]
    }
)
# `rocm-smi --showproductname --showmeminfo vram --showdriverversion --json`, two cards.
ROCM_SMI = json.dumps(
    {
        "card0": {"Card Series": "AMD Instinct MI300X", "VRAM Total Memory (B)": "206141652992"},
        "card1": {"Card Series": "AMD Instinct MI300X", "VRAM Total Memory (B)": "206141652992"},
        "system": {"Driver version": "6.7.0"},
    }
)


def inventory(vendor: Vendor, names: list[str]) -> NodeInventory:
    return node.inventory_from(vendor, [GpuReading(n, 80.0, "1.0") for n in names])


# --------------------------------------------------------------------------- parsing


def test_nvidia_smi_output_of_one_h200_reads_as_one_device_in_gib() -> None:
    assert node.parse_nvidia_smi(NVIDIA_H200) == [GpuReading("NVIDIA H200", 140.4, "580.159.04")]


def test_nvidia_smi_output_of_eight_gpus_reads_as_eight_devices() -> None:
    readings = node.parse_nvidia_smi(NVIDIA_8X_H100)
    assert len(readings) == 8
    assert {r.name for r in readings} == {"NVIDIA H100 80GB HBM3"}
    assert readings[0].memory_gib == 79.65
    assert readings[0].driver == "550.54.15"


def test_nvidia_smi_unknown_memory_reads_as_zero_and_blank_lines_are_skipped() -> None:
    assert node.parse_nvidia_smi("\nNVIDIA L4, [N/A], [N/A]\n\n") == [
        GpuReading("NVIDIA L4", 0.0, None)
    ]


def test_a_malformed_nvidia_smi_row_is_an_error() -> None:
    with pytest.raises(ValueError, match="unexpected nvidia-smi row"):
        node.parse_nvidia_smi("No devices were found")


def test_amd_smi_list_layout_reads_eight_mi300x_with_driver() -> None:
    readings = node.parse_amd_smi(AMD_SMI_LIST)
    assert len(readings) == 8
    assert readings[0] == GpuReading("AMD Instinct MI300X", 191.98, "6.7.0")


def test_amd_smi_gpu_data_layout_reads_the_same_way() -> None:
    assert node.parse_amd_smi(AMD_SMI_GPU_DATA) == [
        GpuReading("AMD Instinct MI325X", 255.98, "6.10.5")
    ]


def test_amd_smi_single_object_with_string_size_and_board_name_fallback() -> None:
    one = {
        "gpu": 0,
        "asic": {"market_name": "N/A"},
        "board": {"product_name": "AMD Instinct MI300X"},
        "vram": {"size": "196592 MB"},
    }
    assert node.parse_amd_smi(json.dumps(one)) == [GpuReading("AMD Instinct MI300X", 191.98, None)]


def test_rocm_smi_fallback_reads_cards_in_order_with_system_driver() -> None:
    readings = node.parse_rocm_smi(ROCM_SMI)
    assert readings == [GpuReading("AMD Instinct MI300X", 191.98, "6.7.0")] * 2


# --------------------------------------------------------------------------- detection


def test_detect_on_a_machine_without_gpu_tools_says_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    if any(node._tool(t) for t in ("nvidia-smi", "amd-smi", "rocm-smi")):
        pytest.skip("a GPU vendor tool is installed here")
    inv = node.detect()
    assert inv.vendor == "cpu"
    assert inv.gpu_count == 0 and inv.gpu_names == [] and inv.catalog_gpu is None
    assert inv.cpus >= 1 and inv.ram_gib > 0 and inv.hostname


def fake_tools(monkeypatch: pytest.MonkeyPatch, outputs: dict[str, str | None]) -> list[list[str]]:
    calls: list[list[str]] = []
    monkeypatch.setattr(node, "_tool", lambda name: name if name in outputs else None)

    def run(argv: list[str]) -> str | None:
        calls.append(argv)
        return outputs[argv[0]]

    monkeypatch.setattr(node, "_run", run)
    return calls


def test_detect_prefers_nvidia_smi_and_matches_the_catalog(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = fake_tools(monkeypatch, {"nvidia-smi": NVIDIA_8X_H100, "amd-smi": AMD_SMI_LIST})
    inv = node.detect()
    assert (inv.vendor, inv.gpu_count, inv.catalog_gpu) == ("nvidia", 8, "H100-SXM-80GB")
    assert inv.driver == "550.54.15"
    assert calls == [["nvidia-smi", *node.NVIDIA_QUERY]]


def test_detect_falls_back_to_amd_smi_then_rocm_smi(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_tools(monkeypatch, {"nvidia-smi": None, "amd-smi": AMD_SMI_LIST})
    assert (node.detect().vendor, node.detect().catalog_gpu) == ("amd", "MI300X")
    fake_tools(monkeypatch, {"amd-smi": "not json", "rocm-smi": ROCM_SMI})
    inv = node.detect()
    assert (inv.vendor, inv.gpu_count, inv.driver) == ("amd", 2, "6.7.0")


def test_a_vendor_tool_that_fails_or_hangs_means_no_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    def hang(*args: object, **kwargs: object) -> None:
        raise subprocess.TimeoutExpired(cmd="nvidia-smi", timeout=node.SMI_TIMEOUT_S)

    monkeypatch.setattr(node.subprocess, "run", hang)
    assert node._run(["nvidia-smi"]) is None
    monkeypatch.undo()
    assert node._run(["/nonexistent/nvidia-smi"]) is None
    assert node._run(["false"]) is None


# --------------------------------------------------------------------------- Ray resources


def test_an_eight_h100_node_offers_eight_nvidia_slots_under_its_catalog_name() -> None:
    inv = inventory("nvidia", ["NVIDIA H100 80GB HBM3"] * 8)
    assert node.ray_resources(inv) == {"accel:nvidia": 8, "gpu:H100-SXM-80GB": 8}
    assert node.ray_labels(inv) == {"vendor": "nvidia", "gpu": "H100-SXM-80GB"}


def test_an_mi300x_node_offers_amd_slots() -> None:
    inv = inventory("amd", ["AMD Instinct MI300X"] * 8)
    assert node.ray_resources(inv) == {"accel:amd": 8, "gpu:MI300X": 8}
    assert node.ray_labels(inv) == {"vendor": "amd", "gpu": "MI300X"}


def test_a_cpu_node_offers_one_cpu_slot_and_no_gpu() -> None:
    inv = inventory("cpu", [])
    assert node.ray_resources(inv) == {"accel:cpu": 1}
    assert node.ray_labels(inv) == {"vendor": "cpu", "gpu": "none"}


def test_an_uncatalogued_gpu_keeps_its_reported_name_made_safe_for_ray() -> None:
    inv = inventory("nvidia", ["NVIDIA GeForce RTX 3090 Ti"] * 2)
    assert inv.catalog_gpu is None
    assert node.ray_resources(inv) == {"accel:nvidia": 2, "gpu:NVIDIA-GeForce-RTX-3090-Ti": 2}
    assert node.sanitize("  (weird)  name/with:colons!  ") == "weird-name-with-colons"
    assert len(node.sanitize("x" * 200)) == 63
    assert node.sanitize("???") == "unknown"


def test_a_node_with_two_gpu_models_counts_each_and_labels_itself_mixed() -> None:
    inv = inventory("nvidia", ["NVIDIA H100 80GB HBM3", "NVIDIA L4", "NVIDIA L4"])
    assert inv.catalog_gpu is None
    assert node.ray_resources(inv) == {"accel:nvidia": 3, "gpu:H100-SXM-80GB": 1, "gpu:L4": 2}
    assert node.ray_labels(inv)["gpu"] == "mixed"


# --------------------------------------------------------------------------- actor options


@pytest.mark.parametrize(
    ("target", "gpu", "expected"),
    [
        ("cuda", None, {"num_cpus": 0, "num_gpus": 1, "resources": {"accel:nvidia": 1}}),
        (
            "cuda",
            "NVIDIA H100 80GB HBM3",
            {
                "num_cpus": 0,
                "num_gpus": 1,
                "resources": {"accel:nvidia": 1, "gpu:H100-SXM-80GB": 1},
            },
        ),
        (
            "rocm",
            "MI300X",
            {"num_cpus": 0, "num_gpus": 1, "resources": {"accel:amd": 1, "gpu:MI300X": 1}},
        ),
        ("cpu", None, {"num_cpus": 1, "num_gpus": 0, "resources": {"accel:cpu": 1}}),
    ],
)
def test_actor_options_ask_for_the_targets_accelerator_slot(
    target: str, gpu: str | None, expected: dict[str, object]
) -> None:
    assert node.actor_options(target, gpu) == expected


def test_actor_options_ask_for_exactly_what_the_matching_node_offers() -> None:
    inv = inventory("nvidia", ["NVIDIA H200"])
    wanted = node.actor_options("cuda", inv.catalog_gpu)["resources"]
    offered = node.ray_resources(inv)
    assert all(offered.get(k, 0) >= v for k, v in wanted.items())


def test_actor_options_refuse_an_unknown_target_or_a_gpu_for_cpu() -> None:
    with pytest.raises(ValueError, match="unknown target 'tpu'"):
        node.actor_options("tpu", None)
    with pytest.raises(ValueError, match="cannot ask for GPU"):
        node.actor_options("cpu", "H100")


# --------------------------------------------------------------------------- ray start


def parsed(argv: list[str]) -> dict[str, object]:
    """The options Ray 2.60's own `ray start` CLI parses from argv (nothing is started)."""
    from ray.scripts.scripts import start

    assert argv[0].endswith("ray") and argv[1] == "start"
    return dict(start.make_context("start", argv[2:]).params)


@pytest.mark.ray
def test_start_command_for_a_head_binds_the_dashboard_to_localhost() -> None:
    argv = node.start_command(True, None, inventory("cpu", []), port=6380)
    params = parsed(argv)
    assert params["head"] is True and params["port"] == 6380
    assert params["dashboard_host"] == "127.0.0.1"
    assert params["disable_usage_stats"] is True and params["block"] is False
    assert params["num_gpus"] == 0
    assert json.loads(str(params["resources"])) == {"accel:cpu": 1}


@pytest.mark.ray
def test_start_command_for_a_gpu_worker_declares_gpus_resources_and_labels() -> None:
    from ray._private.label_utils import parse_node_labels_string

    inv = inventory("nvidia", ["NVIDIA H100 80GB HBM3"] * 8)
    argv = node.start_command(False, "10.0.0.1:6379", inv, block=True)
    params = parsed(argv)
    assert params["address"] == "10.0.0.1:6379" and params["head"] is False
    assert params["num_gpus"] == 8 and params["block"] is True
    assert json.loads(str(params["resources"])) == {"accel:nvidia": 8, "gpu:H100-SXM-80GB": 8}
    assert parse_node_labels_string(str(params["labels"])) == {
        "vendor": "nvidia",
        "gpu": "H100-SXM-80GB",
    }


def test_start_command_needs_exactly_one_of_head_and_address() -> None:
    inv = inventory("cpu", [])
    with pytest.raises(ValueError, match="takes no --address"):
        node.start_command(True, "h:1", inv)
    with pytest.raises(ValueError, match="needs --address"):
        node.start_command(False, None, inv)
