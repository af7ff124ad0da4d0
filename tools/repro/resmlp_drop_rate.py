"""LiBai main's ResMLP ignores `drop_rate`: its blocks take `drop` and pass it nowhere.

    python tools/repro/resmlp_drop_rate.py   # LiBai main only (0.1.1 has no ResMLP), one process, 10-30 s

`ResMLP(drop_rate=...)` hands the rate to each block as `drop`; the block builds its MLP without an
output dropout and has no other dropout, so a model built with `drop_rate=0.5` holds no dropout with a
rate above 0 and, with the same weights, trains on the same outputs as one built with `drop_rate=0`
(drop-path off in both).
"""
import oneflow as flow
from omegaconf import DictConfig

from _common import libai_version, verdict

import libai.models
from libai.utils import distributed as dist

if not hasattr(libai.models, "ResMLP"):
    verdict(False, f"libai {libai_version()} has no ResMLP")
    raise SystemExit(0)
dist.setup_dist_util(DictConfig(dict(data_parallel_size=1, tensor_parallel_size=1, pipeline_parallel_size=1,
                                     pipeline_num_layers=2)))


def build(drop_rate):
    flow.manual_seed(0)
    return libai.models.ResMLP(img_size=32, patch_size=8, in_chans=3, embed_dim=16, depth=2, drop_rate=drop_rate,
                               drop_path_rate=0.0, num_classes=10).train()


plain, dropped = build(0.0), build(0.5)
rates = sorted({round(float(m.p), 3) for m in dropped.modules() if isinstance(m, flow.nn.Dropout)})
images = flow.randn(4, 3, 32, 32).to_global(placement=dist.get_layer_placement(0), sbp=flow.sbp.broadcast)
same = bool((plain(images)["prediction_scores"] == dropped(images)["prediction_scores"]).all())
verdict(same and all(rate == 0 for rate in rates),
        f"libai {libai_version()}: ResMLP(drop_rate=0.5) holds dropouts of rates {rates or 'none'}; "
        f"its training-mode outputs {'equal' if same else 'differ from'} drop_rate=0's")
