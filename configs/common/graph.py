from omegaconf import DictConfig

from libai.config import LazyCall
from libai_ext.engine.graph import GraphBase

# Eager by default; graph.enabled=True builds these (libai_ext's GraphBase works on OneFlow 0.9.0,
# LiBai 0.1.1's libai.models.utils.GraphBase does not).
graph = DictConfig(dict(
    enabled=False,
    debug=-1,
    train_graph=LazyCall(GraphBase)(is_train=True),
    eval_graph=LazyCall(GraphBase)(is_train=False),
))
