"""Shared by the reproductions: a LiBai layout on however many ranks this process was launched with."""
import oneflow as flow
from omegaconf import DictConfig


def layout(dp=1, tp=1, pp=1, layers=None):
    from libai.utils import distributed as dist

    assert flow.env.get_world_size() == dp * tp * pp, f"launch with --nproc_per_node {dp * tp * pp}"
    dist.setup_dist_util(DictConfig({"data_parallel_size": dp, "tensor_parallel_size": tp,
                                     "pipeline_parallel_size": pp, "pipeline_num_layers": layers or pp}))
    return dist


def launch_on_two_ranks(script, *args, timeout=120):
    """``(exit code, output)`` of ``script --rank args...`` on 2 CPU ranks under OneFlow's launcher; on a timeout the
    launcher and every rank it started are killed and the code is "timeout"."""
    import os
    import signal
    import subprocess
    import sys
    import tempfile

    command = [sys.executable, "-m", "oneflow.distributed.launch", "--nproc_per_node", "2",
               "--master_port", str(29000 + os.getpid() % 1000), os.path.abspath(script), "--rank", *args]
    with tempfile.TemporaryFile("w+") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), start_new_session=True)
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            code = "timeout"
        out.seek(0)
        return code, out.read()


def verdict(reproduced, what):
    print(("REPRODUCED: " if reproduced else "NOT REPRODUCED: ") + what, flush=True)


def libai_version():
    import libai

    return getattr(libai, "__version__", "?")


def message(error, limit=160):
    """An exception's message on one line, without OneFlow's colour codes and C++ trace."""
    import re

    text = re.sub(r"\x1b\[[0-9;]*m", "", str(error))
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("("):  # a failed OneFlow check: its operands, then a C++ trace
        where = re.findall(r", in (\w+)", text)
        kind = re.findall(r"Error Type: (\S+)", text)
        summary = f"check {lines[0]} failed in {where[-1] if where else '?'} ({kind[-1] if kind else '?'})"
    else:
        summary = lines[0] if lines else ""
    return f"{type(error).__name__}: {summary[:limit]}"
