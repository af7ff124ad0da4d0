"""The venv imports oneflow, libai and libai_ext with no environment set up by hand."""
import os
import subprocess
import sys


def clean_env():
    keep = {k: os.environ[k] for k in ("PATH", "HOME") if k in os.environ}
    return keep  # notably no LD_LIBRARY_PATH and no PYTHONPATH


def test_imports_in_a_clean_environment(tmp_path):
    code = "import oneflow, libai, libai_ext; print('ok', oneflow.__version__, libai_ext.__version__)"
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ok 0.9.0" in out.stdout


def test_cpu_patches_are_applied_and_idempotent():
    import libai_ext
    from libai.utils import distributed as dist

    first = libai_ext.apply_patches()
    assert libai_ext.apply_patches() == first
    # Decided by the installed LiBai and the tensor's device, the same on CPU and CUDA hosts
    # (tests/test_compat.py has each branch).
    assert "libai.engine.default._compile_dependencies" in first
    if "libai.utils.distributed.ttol" in first:
        assert dist.ttol.__module__ == "libai_ext.compat.cuda_placements"


def test_layer_norm_patch_matches_reference():
    import numpy as np
    import oneflow as flow

    import libai_ext
    from libai.layers import LayerNorm
    from libai.utils import distributed as dist
    from omegaconf import DictConfig

    libai_ext.apply_patches()
    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 1}))
    norm = LayerNorm(6)
    x = np.random.RandomState(0).randn(3, 6).astype(np.float32)
    y = norm(flow.tensor(x).to_global(placement=norm.weight.placement, sbp=flow.sbp.broadcast)).to_local().numpy()
    expected = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, expected, atol=1e-5)
