"""On every rank: train configs a few iterations, one after another in this process, through
tools/train_net.py's own set-up (the config's trainer and layout): this project's LiBai model-zoo configs
(``--configs``), or any config files with their own overrides (``--plan``, a JSON list of
``{"name", "config_file", "overrides"}``: LiBai main's own configs).

Writes one record per config: its raw losses (rank 0's ``losses.jsonl``), the stochastic layers of
the built model (libai_ext's, with their rates, and any left unconverted), the placements its
parameters sit on, the trainer, the train graph's class (graph mode), the model's vocabulary size
and the train loader's sampler.
"""
import argparse
import json
import os
import time

from common import run_or_die
from libai.config import default_argument_parser, try_get_key
from libai_ext.engine.launch import build_trainer, setup, train
from libai_ext.random.layers import DropPath, Dropout
from libai_ext.testing import read_raw_losses, write_rank_result

NLP = ("libai_gpt2_cpu", "libai_bert_cpu", "libai_t5_cpu", "libai_roberta_cpu")  # read text_data.root


def overrides(name, args):
    common = [f"train.train_iter={args.iters}", "train.log_period=1", "train.evaluation.enabled=False",
              f"train.output_dir={os.path.join(args.out, name)}", f"train.dist.pipeline_parallel_size={args.pp}"]
    if name in NLP:
        return common + [f"text_data.root={args.text_data}"]
    return common + [f"dataloader.train.dataset.0.root.root={args.digits}",
                     f"dataloader.test.0.dataset.root.root={args.digits}"]


def stochastic_layers(model):
    """``{name: [kind, rate]}`` of libai_ext's stochastic layers, and the names of OneFlow/LiBai ones left."""
    ours, left = {}, []
    for name, module in model.named_modules():
        if isinstance(module, (Dropout, DropPath)):
            ours[name] = [type(module).__name__, module.rate]
        elif type(module).__name__ in ("Dropout", "DropPath"):
            left.append(f"{name} ({type(module).__module__})")
    return ours, left


def placements(model):
    return sorted({tuple(p.placement.ranks.flatten().tolist()) for p in model.parameters() if p.is_global})


def qualified(obj):
    return None if obj is None else f"{type(obj).__module__}.{type(obj).__qualname__}"


def runs(args):
    """``[(name, config file, overrides)]``: the zoo configs or the plan's entries."""
    if args.plan:
        with open(args.plan) as f:
            return [(run["name"], run["config_file"],
                     run["overrides"] + [f"train.output_dir={os.path.join(args.out, run['name'])}"])
                    for run in json.load(f)]
    return [(name, os.path.join(args.repo, "configs", f"{name}.py"), overrides(name, args)) for name in args.configs]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--repo")
    parser.add_argument("--configs", nargs="+", default=[])
    parser.add_argument("--plan", help="a JSON list of {name, config_file, overrides} to run instead of --configs")
    parser.add_argument("--text-data")
    parser.add_argument("--digits")
    parser.add_argument("--out", required=True)
    parser.add_argument("--iters", type=int, default=2)
    parser.add_argument("--pp", type=int, default=1)
    args = parser.parse_args()
    for name, config_file, opts in runs(args):
        cli = default_argument_parser().parse_args(["--config-file", config_file, *opts])
        start = time.perf_counter()
        cfg, trainer_cls = setup(cli)
        trainer = build_trainer(cfg, trainer_cls)
        train(cfg, trainer_cls, trainer)
        ours, left = stochastic_layers(trainer.model)
        losses = read_raw_losses(cfg.train.output_dir) if os.path.exists(
            os.path.join(cfg.train.output_dir, "losses.jsonl")) else []
        loader = trainer.train_loader
        write_rank_result(config=name, trainer=type(trainer).__name__, losses=[r["total_loss"] for r in losses],
                          stochastic=ours, unconverted=left, placements=placements(trainer.model),
                          graph=qualified(getattr(trainer, "graph_train", None)) if cfg.graph.enabled else None,
                          vocab_size=try_get_key(cfg, "model.cfg.vocab_size", default=None),
                          sampler=qualified(getattr(loader, "batch_sampler", None) or getattr(loader, "sampler", None)),
                          seconds=round(time.perf_counter() - start, 2))


if __name__ == "__main__":
    run_or_die(main)
