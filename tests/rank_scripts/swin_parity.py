"""On every rank: build a tiny libai_ext Swin, load one layout-independent set of weights, run it.

The weights come from numpy seeded by each parameter's name (same on every rank and
layout), so a correct parallel model computes the single-rank logits, losses and
gradients.  Each rank writes one record: the full logits and losses (last-stage ranks),
and fingerprints of the full initial value and gradient of every parameter on this rank.
"""
import zlib

import numpy as np
import oneflow as flow
from omegaconf import OmegaConf

from common import layout_parser, setup_layout
from libai.config import LazyCall, instantiate
from libai.utils import distributed as dist
from libai_ext.models import SwinTransformer
from libai_ext.testing import write_rank_result

# 8x8 tokens, window 2: shifted windows in both Swin stages; 6 blocks so that pp=2 cuts
# stage 2 in the middle (blocks 0-2 | 3-5) and patch merging sits on the first pipeline stage.
CONFIG = dict(img_size=16, patch_size=2, in_chans=3, num_classes=10, embed_dim=24, depths=[2, 4],
              num_heads=[2, 4], window_size=2, drop_rate=0.0, attn_drop_rate=0.0, drop_path_rate=0.0)
BATCH = 4


def replicated():
    return dist.get_nd_sbp([flow.sbp.broadcast, flow.sbp.broadcast])


def holds(tensor):
    return flow.env.get_rank() in tensor.placement.ranks.flatten().tolist()


def full_local(tensor):
    """The whole global ``tensor`` as a numpy array on the ranks of its placement (None elsewhere)."""
    tensor = tensor.to_global(sbp=replicated())
    return tensor.to_local().numpy() if holds(tensor) else None


def name_rng(name, salt=0):
    return np.random.RandomState(zlib.crc32(name.encode()) + salt)


def reference_value(name, shape):
    noise = name_rng(name).standard_normal(shape).astype(np.float32)
    if "norm" in name and name.endswith(".weight"):
        return 1.0 + 0.1 * noise
    return 0.2 * noise


def load_reference_weights(model):
    with flow.no_grad():
        for name, param in model.named_parameters():
            value = flow.tensor(reference_value(name, tuple(param.shape)))
            # Identical on every rank: replicate, then let OneFlow slice each rank's shard.
            value = value.to_global(placement=param.placement, sbp=replicated()).to_global(sbp=param.sbp)
            param.copy_(value)


def batch():
    images = np.random.RandomState(0).standard_normal((BATCH, 3, 16, 16)).astype(np.float32)
    ids = np.random.RandomState(1).randint(0, CONFIG["num_classes"], BATCH)
    soft = np.random.RandomState(2).dirichlet(np.ones(CONFIG["num_classes"]), BATCH).astype(np.float32)
    onehot = np.eye(CONFIG["num_classes"], dtype=np.float32)[ids]
    data_sbp = dist.get_nd_sbp([flow.sbp.split(0), flow.sbp.broadcast])

    def place(array, layer_idx):  # as LiBai's get_batch: images on layer 0, labels on the last layer
        t = flow.tensor(array).to_global(placement=dist.get_layer_placement(layer_idx), sbp=replicated())
        return t.to_global(sbp=data_sbp)

    return place(images, 0), place(ids, -1), place(soft, -1), place(onehot, -1)


def fingerprint(name, array):
    weights = name_rng(name, salt=1).standard_normal(array.shape)  # catches permuted entries too
    return [float(array.sum()), float(np.abs(array).sum()), float((array * weights).sum())]


def main():
    args = layout_parser().parse_args()
    setup_layout(args)
    record = {}

    model = instantiate(LazyCall(SwinTransformer)(**CONFIG))  # as a LiBai LazyConfig builds it
    # The model's own random init: replicas of one parameter (over dp) must hold equal values.
    initial = {name: full_local(param.detach()) for name, param in model.named_parameters()}
    record["init"] = {name: fingerprint(name, value) for name, value in initial.items() if value is not None}
    load_reference_weights(model)
    images, ids, soft, onehot = batch()

    model.eval()
    with flow.no_grad():
        logits = full_local(model(images)["prediction_scores"])

    model.train()
    losses = {kind: model(images, labels)["losses"] for kind, labels in
              (("int", ids), ("soft", soft), ("onehot", onehot))}
    (losses["int"] + losses["soft"]).backward()
    losses = {kind: full_local(loss.detach()) for kind, loss in losses.items()}
    if logits is not None:
        record.update(logits=logits.tolist(), losses={k: float(v) for k, v in losses.items()})

    grads, missing = {}, []
    for name, param in model.named_parameters():
        if param.grad is None:
            missing.append(name)
            continue
        grad = full_local(param.grad)
        if grad is not None:
            grads[name] = fingerprint(name, grad) if np.isfinite(grad).all() else None
    record.update(grads=grads, missing_grads=missing)

    # Dropout, attention dropout, DropPath and absolute position embedding active: forward and
    # backward must still run.  Built through from_config (the keys of libai's from_config).
    noisy_cfg = dict(CONFIG, drop_rate=0.1, attn_drop_rate=0.1, drop_path_rate=0.3, mlp_ratio=4.0,
                     qkv_bias=True, qk_scale=None, ape=True, patch_norm=True, use_checkpoint=False)
    noisy = SwinTransformer(OmegaConf.create(noisy_cfg))
    block = noisy.layers[1].blocks[-1]
    record["from_config"] = dict(ape=noisy.ape, attn_drop=block.attn.attn_drop.p,
                                 drop_path=type(block.drop_path).__name__)
    noisy.train()
    loss = noisy(images, soft)["losses"]
    loss.backward()
    noisy_loss = full_local(loss.detach())
    if noisy_loss is not None:
        record["noisy_loss"] = float(noisy_loss)

    write_rank_result(**record)


if __name__ == "__main__":
    main()
