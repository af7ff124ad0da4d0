"""The graph uses every op check runs on a global tensor: a forward inside ``nn.Graph``, one train step."""
import oneflow as flow


def graph_forward(op, x):
    """``op(x)`` traced and run inside an ``nn.Graph``."""

    class Forward(flow.nn.Graph):
        def build(self, x):
            return op(x)

    return Forward()(x)


def train_step(op, x):
    """One SGD step (lr 1) of a train graph on ``loss = op(x * w).sum()``, ``w`` ones over x's last dimension
    (broadcast on x's placement): returns ``w`` after the step, gathered, i.e. ``1 - d loss / d w``."""

    class Model(flow.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = flow.nn.Parameter(flow.ones(x.shape[-1], placement=x.placement, sbp=flow.sbp.broadcast))

        def forward(self, x):
            return op(x * self.w).sum()

    model = Model()
    train_graph(model, flow.optim.SGD(model.parameters(), lr=1.0))(x)
    return model.w.to_global(sbp=flow.sbp.broadcast).to_local().numpy()


def train_graph(model, optimizer):
    """A train ``nn.Graph``: ``loss = model(x)``, its backward and ``optimizer``'s step."""

    class Train(flow.nn.Graph):
        def __init__(self):
            super().__init__()
            self.model = model
            self.add_optimizer(optimizer)

        def build(self, x):
            loss = self.model(x)
            loss.backward()
            return loss

    return Train()
