"""SGLang's OpenAI-compatible server (`python -m sglang.launch_server`) for one group: the same
ServerArgs fields as its offline engine (args.engine_kwargs) as command-line flags."""

from __future__ import annotations

import sys

from harness.backends.base import BackendOptions, Server
from harness.backends.sglang.args import engine_kwargs, launch_args
from harness.spec.scenario import GroupKey


class SglangServer(Server):
    ready_path = "/health"

    @classmethod
    def command(
        cls, group: GroupKey, options: BackendOptions, host: str, port: int, served_model_name: str
    ) -> list[str]:
        args = launch_args(engine_kwargs(group, options), host, port)
        return [sys.executable, "-m", "sglang.launch_server", *args,
                "--served-model-name", served_model_name]  # fmt: skip
