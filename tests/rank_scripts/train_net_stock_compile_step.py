"""``tools/train_net.py`` with LiBai 0.1.1's own dataset-helper compile step put back (stock start-up).

libai_ext skips ``libai.engine.default._compile_dependencies`` on every host; this script calls
LiBai's original function again inside ``default_setup``, so a test can see what stock LiBai
does at start-up on the same host and prove that its checks would catch it.
"""
import libai.engine.default as libai_default

from libai_ext.cli import train_net
from libai_ext.engine import launch

_stock_compile_step = libai_default._compile_dependencies  # captured before any patch runs


def default_setup_with_stock_compile_step(cfg, args):
    libai_default._compile_dependencies = _stock_compile_step
    return libai_default.default_setup(cfg, args)


if __name__ == "__main__":
    launch.default_setup = default_setup_with_stock_compile_step
    train_net.main()
