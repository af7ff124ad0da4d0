from omegaconf import DictConfig

from libai.config import LazyCall
from libai_ext.engine.graph import GraphBase

# Eager by default; graph.enabled=True builds these.  Any graph class may be named here: LiBai's own
# libai.models.utils.GraphBase runs too, on both lines (libai_ext repairs 0.1.1's for OneFlow 0.9.0's
# ProxyModule), but sets pipeline stages only through a model's own set_pipeline_stage_id; libai_ext's
# GraphBase sets them from each module's layer_idx, so models without that code (the demo, the Swin) work.
graph = DictConfig(dict(
    enabled=False,
    debug=-1,
    # Read by LiBai main's build_graph only: OneFlow's global view and auto-parallel search.
    global_mode=dict(enabled=False),
    auto_parallel=dict(enabled=False, enable_auto_parallel_ignore_user_sbp_config=False, trunk_algo=True,
                       sbp_collector=False),
    train_graph=LazyCall(GraphBase)(is_train=True),
    eval_graph=LazyCall(GraphBase)(is_train=False),
))
