"""A group's layout as vLLM's ParallelConfig arguments and the CPU ranks' core binding."""

from __future__ import annotations

import pytest

from harness.backends.vllm.args import cpu_thread_binding, engine_environment, layout_kwargs
from harness.spec.capabilities import Layout
from harness.spec.scenario import GroupKey


def group(layout: Layout | None) -> GroupKey:
    return GroupKey(target="cpu", model="tiny-llama", revision="main", backend="vllm",
                    quantization="none", kv_cache_dtype="auto", layout=layout)  # fmt: skip


def test_one_card_runs_in_process_and_a_layout_starts_a_process_per_rank() -> None:
    assert layout_kwargs(group(None)) == {
        "tensor_parallel_size": 1, "distributed_executor_backend": "uni",
    }  # fmt: skip
    assert layout_kwargs(group(Layout(tensor=4, pipeline=2, expert=True))) == {
        "tensor_parallel_size": 4,
        "pipeline_parallel_size": 2,
        "distributed_executor_backend": "mp",
        "enable_expert_parallel": True,
    }


def test_cpu_ranks_get_equal_runs_of_cores() -> None:
    assert cpu_thread_binding(2, [0, 1]) == "0|1"  # the note: 2 ranks on 2 cores
    assert cpu_thread_binding(2, [3, 2, 1, 0]) == "0-1|2-3"
    with pytest.raises(ValueError):
        cpu_thread_binding(4, [0, 1])


def test_only_a_cpu_layout_binds_threads() -> None:
    assert engine_environment(group(Layout(tensor=2)), "cpu", [0, 1]) == {
        "VLLM_CPU_OMP_THREADS_BIND": "0|1"
    }
    assert engine_environment(group(None), "cpu", [0, 1]) == {}
    assert engine_environment(group(Layout(tensor=2)), "cuda", [0, 1]) == {}


def test_pipeline_stages_on_gpus_start_through_vllms_ray_executor_and_on_the_cpu_through_mp() -> (
    None
):
    pp = Layout(tensor=2, pipeline=2)
    cuda = GroupKey(target="cuda", model="tiny-llama", revision="main", backend="vllm",
                    quantization="none", kv_cache_dtype="auto", layout=pp)  # fmt: skip
    assert layout_kwargs(cuda)["distributed_executor_backend"] == "ray"
    # vLLM CPU has no Ray executor (its platform names no Ray device): one node, a process a rank
    assert layout_kwargs(group(pp))["distributed_executor_backend"] == "mp"


def test_a_layouts_server_gets_its_ranks_executor_and_core_binding() -> None:
    from harness.modes.serving.device.server import ServerConfig

    kwargs = {"model": "/m", **layout_kwargs(group(Layout(tensor=2)))}
    config = ServerConfig.from_engine_kwargs(
        kwargs, environment={"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    )
    args = config.serve_args("127.0.0.1", 8000)
    at = args.index("--tensor-parallel-size")
    assert args[at + 1] == "2"
    at = args.index("--distributed-executor-backend")
    assert args[at + 1] == "mp"
    assert config.environment == {"VLLM_CPU_OMP_THREADS_BIND": "0|1"}
    one = ServerConfig.from_engine_kwargs({"model": "/m", **layout_kwargs(group(None))})
    assert "--distributed-executor-backend" not in one.serve_args("127.0.0.1", 8000)
