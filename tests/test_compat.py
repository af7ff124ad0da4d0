"""libai_ext.compat: each repair is decided by what it repairs (LiBai line, file, tensor device).

One process, no ranks: every branch is driven by injecting its decision input, and the
branch the installed LiBai takes is asserted against what that LiBai really has.
"""
import inspect
import types

import oneflow as flow
import pytest
from omegaconf import OmegaConf

import libai.engine.default as default_module
import libai.evaluation.evaluator as evaluator_module
import libai.evaluation.utils as evaluation_utils
from libai.engine import DefaultTrainer
from libai.utils import distributed as dist

from libai_ext import compat
from libai_ext.compat import (
    compile_step, cpu_layer_norm, cuda_placements, detect, get_batch_api, layout, libai_main, libai_v0_1,
    patching,
)

LINES = [libai_v0_1, libai_main]


@pytest.fixture
def fresh_patches(monkeypatch):
    """Run a test's patches against an empty record; every replaced LiBai attribute is restored."""
    monkeypatch.setattr(patching, "_applied", [])
    for owner, name in [(default_module, "_compile_dependencies"), (dist, "ttol"),
                        (evaluation_utils, "pad_batch"), (evaluator_module, "pad_batch")]:
        monkeypatch.setattr(owner, name, getattr(owner, name))
    return patching


# --- which line is installed ---------------------------------------------------------------------

def test_the_installed_line_matches_its_get_batch_signature():
    names = list(inspect.signature(DefaultTrainer.get_batch).parameters)[1:]
    line = detect.libai_line()
    assert tuple(names) == line.GET_BATCH_ARGUMENTS, (line.NAME, names)


def test_installed_ttol_device_parameter_is_what_the_line_has():
    # 0.1.1: ttol(tensor, pure_local, ranks) hard-codes "cuda"; main: ttol(tensor, pure_local, device, ranks).
    assert detect.ttol_takes_device() == (detect.libai_line() is libai_main)


def test_compile_step_can_run_only_where_a_makefile_is(tmp_path):
    assert not detect.compile_step_can_run(str(tmp_path))
    (tmp_path / "Makefile").write_text("all:\n")
    assert detect.compile_step_can_run(str(tmp_path))
    # Both installs used here (pip's 0.1.1 sdist, main's archive) ship no Makefile.
    assert not detect.compile_step_can_run()


# --- get_batch's two calling conventions -----------------------------------------------------------

def mixup(x, y):
    return x, y


def test_v0_1_get_batch_arguments():
    split = get_batch_api.split_arguments
    assert split((), {}, libai_v0_1) == (None, None)                       # evaluator: get_batch(data)
    assert split((mixup,), {}, libai_v0_1) == (None, mixup)                # trainers: get_batch(data, mixup)
    assert split((), {"mixup_func": mixup}, libai_v0_1) == (None, mixup)
    assert get_batch_api.call_arguments("cpu", mixup, libai_v0_1) == (mixup,)
    with pytest.raises(TypeError, match="at most 1"):
        split(("cpu", mixup), {}, libai_v0_1)
    with pytest.raises(TypeError, match="input_placement_device"):
        split((), {"input_placement_device": "cpu"}, libai_v0_1)


def test_main_get_batch_arguments():
    split = get_batch_api.split_arguments
    assert split(("cpu",), {}, libai_main) == ("cpu", None)                 # evaluator: (data, device)
    assert split(("cuda", mixup), {}, libai_main) == ("cuda", mixup)        # trainers, positionally
    assert split((), {"mixup_func": mixup}, libai_main) == (None, mixup)
    assert get_batch_api.call_arguments("cpu", mixup, libai_main) == ("cpu", mixup)
    with pytest.raises(TypeError, match="repeated"):
        split(("cpu",), {"input_placement_device": "cpu"}, libai_main)


def test_run_step_arguments_per_line():
    assert get_batch_api.run_step_arguments("cpu", libai_v0_1) == ()
    assert get_batch_api.run_step_arguments("cpu", libai_main) == ("cpu",)


# --- config keys --------------------------------------------------------------------------------

def test_main_fills_what_an_0_1_config_lacks_and_keeps_what_it_sets():
    cfg = OmegaConf.create({"train": {"dist": {"pipeline_parallel_size": 2}}})
    added = compat.fill_missing_config_keys(cfg, libai_main)
    device = libai_main.host_device_type()
    assert added == {"train.rdma_enabled": False, "train.dist.device_type": device,
                     "train.input_placement_device": device}
    assert (cfg.train.rdma_enabled, cfg.train.dist.device_type, cfg.train.input_placement_device) == (
        False, device, device)
    assert cfg.train.dist.pipeline_parallel_size == 2

    cfg = OmegaConf.create({"train": {"rdma_enabled": True, "dist": {"device_type": "cpu"}}})
    assert compat.fill_missing_config_keys(cfg, libai_main) == {"train.input_placement_device": "cpu"}
    assert cfg.train.rdma_enabled is True


def test_v0_1_needs_no_extra_config_key():
    cfg = OmegaConf.create({"train": {}})
    assert compat.fill_missing_config_keys(cfg, libai_v0_1) == {}
    assert "rdma_enabled" not in cfg.train


# --- device traps: the compile step ---------------------------------------------------------------

def test_compile_step_is_skipped_only_without_a_makefile(fresh_patches):
    original = default_module._compile_dependencies
    assert compile_step.apply(compile_step_can_run=True) is False
    assert default_module._compile_dependencies is original
    assert compile_step.apply(compile_step_can_run=False) is True
    assert default_module._compile_dependencies is compile_step.skip_compile_dependencies
    assert "libai.engine.default._compile_dependencies" in fresh_patches.applied()


# --- device traps: "cuda" placements ------------------------------------------------------------

def test_ttol_is_replaced_only_where_it_takes_no_device(fresh_patches):
    original = dist.ttol
    cuda_placements.apply(ttol_takes_device=True)
    assert dist.ttol is original
    assert evaluator_module.pad_batch is cuda_placements.pad_last_batch  # main's evaluator passes no device
    cuda_placements.apply(ttol_takes_device=False)
    assert dist.ttol is cuda_placements.global_to_local


class FakeGlobal:
    """A global tensor as far as ttol looks at it, on a device this host may not have."""

    def __init__(self, device_type):
        self.is_global = True
        self.placement = types.SimpleNamespace(type=device_type)
        self.calls = []

    def to_global(self, **kwargs):
        self.calls.append(kwargs)
        return self

    def to_local(self):
        return self


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_ttol_replacement_places_on_the_tensors_device(monkeypatch, device_type):
    made = []
    monkeypatch.setattr(flow, "placement", lambda device, ranks: made.append((device, ranks)) or "placement")
    tensor = FakeGlobal(device_type)
    assert cuda_placements.global_to_local(tensor, pure_local=True, ranks=[0]) is tensor
    assert made == [(device_type, [0])]
    assert tensor.calls == [{"placement": "placement"}]


def test_ttol_replacement_leaves_local_tensors_alone():
    local = flow.ones(2)
    assert cuda_placements.global_to_local(local, ranks=[0]) is local


def test_pad_last_batch_pads_on_the_tensors_device():
    dist.setup_dist_util(OmegaConf.create({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                           "pipeline_parallel_size": 1}))
    placement = dist.get_layer_placement(0)
    x = flow.arange(3, dtype=flow.float32).to_global(placement=placement, sbp=flow.sbp.broadcast)
    padded, valid = cuda_placements.pad_last_batch({"x": x}, 4, 1, True, device="cuda")  # device ignored
    assert valid == 2
    assert padded["x"].placement == placement
    assert padded["x"].to_local().numpy().tolist() == [0.0, 1.0, 2.0, 0.0]


# --- device traps: LayerNorm ----------------------------------------------------------------------

class FakeInput:
    def __init__(self, device_type):
        self.is_global = False
        self.device = types.SimpleNamespace(type=device_type)


def test_layer_norm_takes_the_cpu_path_for_cpu_inputs_only(monkeypatch):
    seen = []
    forward = cpu_layer_norm.dispatching_forward(lambda module, x: seen.append("libai") or "libai")
    monkeypatch.setattr(cpu_layer_norm, "cpu_layer_norm", lambda module, x: seen.append("cpu") or "cpu")
    assert forward(None, FakeInput("cuda")) == "libai"
    assert forward(None, FakeInput("cpu")) == "cpu"
    assert seen == ["libai", "cpu"]


def test_rms_norm_takes_the_cpu_path_for_cpu_inputs_only():
    seen = []
    forward = cpu_layer_norm.dispatching_forward(lambda module, x: seen.append("libai") or "libai",
                                                 lambda module, x: seen.append("cpu rms") or "cpu rms")
    assert forward(None, FakeInput("cuda")) == "libai"
    assert forward(None, FakeInput("cpu")) == "cpu rms"
    assert seen == ["libai", "cpu rms"]



def _global_cpu(array):
    return flow.tensor(array).to_global(placement=flow.placement("cpu", [0]), sbp=flow.sbp.broadcast)


@pytest.mark.skipif(detect.libai_line() is not libai_main, reason="RMSLayerNorm is LiBai main's (0.1.1 has none)")
def test_rms_norm_runs_on_cpu_with_rms_norms_formula_and_stock_has_no_kernel():
    import numpy as np
    from libai.layers import RMSLayerNorm

    x = np.random.default_rng(0).standard_normal((3, 4, 8)).astype(np.float32)
    norm = RMSLayerNorm(8, eps=1e-5)
    with patching.restoring():
        with pytest.raises(RuntimeError, match="rms_norm"):  # stock: no CPU kernel
            norm(_global_cpu(x))
        cpu_layer_norm.apply()
        with flow.no_grad():
            norm.weight.copy_(_global_cpu(np.linspace(0.5, 1.5, 8, dtype=np.float32)))
        found = norm(_global_cpu(x)).to_local().numpy()
    expected = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-5) * np.linspace(0.5, 1.5, 8, dtype=np.float32)
    np.testing.assert_allclose(found, expected, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="RMSLayerNorm expects trailing shape"):
        cpu_layer_norm.cpu_rms_norm(norm, _global_cpu(x[..., :4]))


class SentencePieceLikeTokenizer:
    """The LLM projects' tokenizers (Llama's, Baichuan's): a plain class whose ``get_vocab`` calls a method it
    lacks, no ``special_tokens_map``, no ``add_tokens``."""
    vocab_size = 4

    def get_vocab(self):
        return {self.convert_ids_to_tokens(i): i for i in range(self.vocab_size)}


def test_special_tokens_leave_a_tokenizer_they_cannot_read_as_it_is():
    from libai_ext.compat import special_tokens

    tokenizer = SentencePieceLikeTokenizer()
    with pytest.raises(AttributeError):  # what the repair called on every tokenizer before
        special_tokens.missing_special_tokens(tokenizer)
    assert special_tokens.add_missing_special_tokens(tokenizer) == []
    assert vars(tokenizer) == {}
    unreadable = SentencePieceLikeTokenizer()
    unreadable.special_tokens_map, unreadable.add_tokens = {"bos_token": "<s>"}, lambda *a, **k: 1 / 0
    assert special_tokens.add_missing_special_tokens(unreadable) == []


@pytest.mark.skipif(detect.libai_line() is not libai_main, reason="HuggingFace loaders are LiBai main's")
def test_huggingface_loaders_read_safetensors_without_torch(tmp_path, monkeypatch):
    import numpy as np
    from libai.models.utils.model_loader.base_loader import ModelLoaderHuggerFace
    from safetensors.numpy import save_file

    from libai_ext.compat import hf_weights

    weights = {"a.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "b.bias": np.ones(3, np.float16)}
    path = str(tmp_path / "model.safetensors")
    save_file(weights, path)
    loader = object.__new__(ModelLoaderHuggerFace)
    with patching.restoring():
        if not hf_weights.torch_usable():  # stock, where torch is missing: it is imported even for safetensors
            with pytest.raises(ImportError, match="torch"):
                loader._load_torch_state_dict([path], use_safetensors=True)
        monkeypatch.setattr(hf_weights, "torch_usable", lambda: False)
        hf_weights.apply()
        read = loader._load_torch_state_dict([path], use_safetensors=True)
        assert sorted(read) == sorted(weights) and all(v.dtype == np.float32 for v in read.values())
        converted = {k: loader._convert_tensor(v) for k, v in read.items()}
        np.testing.assert_array_equal(converted["a.weight"].numpy(), weights["a.weight"])
        monkeypatch.setattr(hf_weights, "torch_usable", lambda: True)  # with torch, LiBai's own code runs
        with pytest.raises(ImportError, match="torch"):
            loader._load_torch_state_dict([path], use_safetensors=True)
    assert "libai_original" not in vars(ModelLoaderHuggerFace._load_torch_state_dict)


def test_a_stand_in_torch_module_is_not_taken_for_torch(monkeypatch):
    from libai_ext.compat import hf_weights

    stand_in = types.ModuleType("torch")
    stand_in.__getattr__ = lambda name: (_ for _ in ()).throw(ImportError(name))
    monkeypatch.setitem(__import__("sys").modules, "torch", stand_in)
    assert not hf_weights.torch_usable()


# --- LiBai 0.1.1's graph code on OneFlow 0.9.0's proxies ------------------------------------------

class StagedModel(flow.nn.Module):
    """A model with a ``set_pipeline_stage_id`` written as LiBai's models write it: OneFlow 0.8's
    ``.origin`` / ``.config`` (0.1.1's only API; main's models take it where ``config`` exists), else
    0.9.0's ``to(nn.Module)`` / ``to(GraphModule).set_stage``."""

    def __init__(self):
        super().__init__()
        placement = dist.get_layer_placement(0)
        self.linear = flow.nn.Linear(4, 4).to_global(placement=placement, sbp=flow.sbp.broadcast)
        self.scale = flow.nn.Parameter(flow.ones(4, placement=placement, sbp=flow.sbp.broadcast))

    def forward(self, x):
        return {"loss": (self.linear(x) * self.scale).sum()}

    @staticmethod
    def set_pipeline_stage_id(model):
        from oneflow.nn.graph import GraphModule

        if hasattr(model.linear, "config"):  # LiBai main's models test this too
            for module_block in model.modules():
                if isinstance(module_block.origin, flow.nn.Linear):
                    module_block.config.stage_id = 0
            model.scale.config.stage_id = 0
        else:
            for module_block in model.modules():
                if isinstance(module_block.to(flow.nn.Module), flow.nn.Linear):
                    module_block.to(GraphModule).set_stage(0, dist.get_layer_placement(0))


def libai_graph(model):
    from libai.models.utils import GraphBase

    main_arguments = {"global_mode": OmegaConf.create({"enabled": False})} if "global_mode" in inspect.signature(
        GraphBase.__init__).parameters else {}  # what LiBai main's build_graph passes
    return GraphBase(model, flow.optim.SGD(model.parameters(), lr=0.1), is_train=True, **main_arguments)


@pytest.fixture
def bare_proxies(monkeypatch, fresh_patches):
    """OneFlow's proxies as shipped (no origin / config), whatever ran before in this process."""
    from oneflow.nn.graph.proxy import ProxyModule, ProxyTensor

    for owner in (ProxyModule, ProxyTensor):
        for name in ("origin", "config"):
            if name in owner.__dict__:
                monkeypatch.delattr(owner, name)
    yield
    for owner in (ProxyModule, ProxyTensor):
        for name in ("origin", "config"):
            if name in owner.__dict__:
                delattr(owner, name)


def test_libai_graph_base_gets_the_proxy_api_it_reads_only_on_the_line_that_needs_it(bare_proxies, capsys):
    from oneflow.nn.graph import GraphModule

    from libai_ext.compat import graph_proxy_v0_1

    needed = graph_proxy_v0_1.graph_base_needs_origin()
    assert needed == (detect.libai_line() is libai_v0_1)
    if needed:  # LiBai 0.1.1 as shipped: the bug (docs/upstream-bugs.md section 9)
        with pytest.raises(AttributeError, match="has no attribute 'origin'"):
            libai_graph(StagedModel())
    assert graph_proxy_v0_1.apply() == needed
    graph = libai_graph(StagedModel())  # LiBai's GraphBase calls the model's set_pipeline_stage_id
    assert graph.model.linear.to(GraphModule).stage_id == 0
    assert graph.model.linear.to(GraphModule).stage_placement == dist.get_layer_placement(0)  # with its placement
    if needed:
        assert graph.model.linear.origin is graph.model.linear.to(flow.nn.Module)
        graph.model.linear.config.activation_checkpointing = True
        assert graph.model.linear.to(GraphModule).activation_checkpointing
        assert "deprecated" not in capsys.readouterr().out  # not 0.9.0's stage_id setter


def test_a_modules_own_config_attribute_keeps_precedence(bare_proxies):
    from oneflow.nn.graph.proxy import ProxyModule

    from libai_ext.compat import graph_proxy_v0_1

    graph_proxy_v0_1.apply(needed=True)
    module = flow.nn.Linear(2, 2)
    module.config = {"hidden": 2}
    assert ProxyModule(module).config == {"hidden": 2}
    assert isinstance(ProxyModule(flow.nn.Linear(2, 2)).config, graph_proxy_v0_1.LegacyGraphConfig)


# --- the layout ---------------------------------------------------------------------------------

def test_input_device_resolution():
    resolve = layout.resolve_device_type
    assert resolve(None, "cpu", cuda_available=False) == "cpu"      # 0.1.1: the layout's device
    assert resolve(None, "cuda", cuda_available=True) == "cuda"
    assert resolve("cuda", "cpu", cuda_available=False) == "cpu"    # as main's get_layer_placement
    assert resolve("cuda", "cuda", cuda_available=True) == "cuda"
    assert resolve("cpu", "cuda", cuda_available=True) == "cpu"     # main's input_placement_device="cpu"


def test_first_layer_of_stage_reads_libai_table():
    assert [layout.first_layer_of_stage(s, [0, 0, 1, 1, 2, 2, 2, 3]) for s in range(4)] == [0, 2, 4, 7]
    with pytest.raises(ValueError, match="stage 2 holds no layer"):
        layout.first_layer_of_stage(2, [0, 1])


# --- the entry point ------------------------------------------------------------------------------

def test_apply_patches_is_idempotent():
    first = compat.apply_patches()
    assert compat.apply_patches() == first
    assert compat.patches_applied() == first
    assert "libai.evaluation.utils.pad_batch" in first
    assert "libai.layers.layer_norm.LayerNorm.forward" in first
    assert ("libai.utils.distributed.ttol" in first) == (not detect.ttol_takes_device())
