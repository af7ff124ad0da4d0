from omegaconf import DictConfig

from libai.config import LazyCall
from libai.models.utils import GraphBase

# Eager by default.  (LiBai 0.1.1's GraphBase does not build on OneFlow 0.9.0.)
graph = DictConfig(dict(
    enabled=False,
    debug=-1,
    train_graph=LazyCall(GraphBase)(is_train=True),
    eval_graph=LazyCall(GraphBase)(is_train=False),
))
