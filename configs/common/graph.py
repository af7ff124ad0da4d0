from omegaconf import DictConfig

from libai.config import LazyCall
from libai_ext.engine.graph import GraphBase

# Eager by default; graph.enabled=True builds these.  libai_ext's GraphBase works on OneFlow 0.9.0
# with LiBai 0.1.1 and main (LiBai 0.1.1's libai.models.utils.GraphBase does not, and main's needs
# per-model set_pipeline_stage_id code; this one sets stages from each module's layer_idx).
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
