"""The config keys libai_ext reads, in one table.

``libai-ext-train --help`` lists them and the typo guard (``key_guard``) knows them from here: a key the plugin starts
to read is one ``ConfigKey`` entry. ``owner`` says whose key it is: a misspelt key of libai_ext's own (``PLUGIN``) is
refused, since the run would silently go on under the default; LiBai's keys the plugin gives a meaning to are listed
for the help, LiBai's others are found in its source (``libai_keys``). Standard library only: the command-line tools
print this before they import OneFlow.
"""
import collections
import textwrap

PLUGIN, LIBAI, LIBAI_MAIN = "libai_ext", "LiBai", "LiBai main"

ConfigKey = collections.namedtuple("ConfigKey", "name default meaning owner")

KEYS = (
    ConfigKey("train.trainer", '"libai_ext.ConsistentBatchTrainer"',
              'dotted path of a libai.engine.DefaultTrainer subclass; "libai.engine.DefaultTrainer" runs stock '
              "LiBai", PLUGIN),
    ConfigKey("train.seed", "0", "int in [0, 2**32): python, numpy and OneFlow are seeded from it before the "
              "trainer is built; every layout-invariant draw is keyed by it", LIBAI),
    ConfigKey("train.seed_scope", '"global"', 'which ranks share a random stream: "global" (every rank), '
              '"data_parallel" (one stream per data-parallel group) or "rank"', PLUGIN),
    ConfigKey("train.randomness", '"layout_invariant"', '"layout_invariant": initial weights, data order, '
              "augmentation, mixup and dropout masks are the same on 1 rank and on any (dp, tp, pp) layout; "
              '"fast": OneFlow\'s native kernels, reproducible on one layout only', PLUGIN),
    ConfigKey("train.init_rebuild_limit_gib", "16", 'with train.randomness="layout_invariant", the largest '
              "parameters and buffers (GiB on one rank) of a model whose build discards a random draw that is built "
              "a second time to tell a discarded draw from one that reached the model untracked; above it such "
              "draws are refused with an error naming each parameter", PLUGIN),
    ConfigKey("train.batch_check", '"off"', "compare every field of the batch across the ranks that must agree, "
              'and stop every rank with BatchMismatchError if they do not: "off", "first" (the first batch) or '
              '"every" step; works with stock DefaultTrainer too', PLUGIN),
    ConfigKey("train.augmentation_check.action", '"refuse"', 'with train.randomness="layout_invariant", what a '
              "sample that reads differently after every generator was disturbed does: \"refuse\" (stop, naming the "
              'transform whose draws are not keyed), "warn" or "off"', PLUGIN),
    ConfigKey("train.augmentation_check.first_batches", "2", "the first train batches each process (or loader "
              "worker) reads that are checked by effect", PLUGIN),
    ConfigKey("train.augmentation_check.period", "50", "after the first batches, one batch in this many is checked "
              "by effect (one sample read again); 0: the first batches only", PLUGIN),
    ConfigKey("train.stage0_only_loading", "true", "under pipeline parallelism only stage 0 reads and augments "
              "training samples, with ConsistentBatchTrainer", PLUGIN),
    ConfigKey("train.checkpointer.checksums", "true", "record a CRC-32 of every file when a checkpoint commits, "
              "and check it before --resume loads the checkpoint (false: sizes only)", PLUGIN),
    ConfigKey("train.checkpointer.max_to_keep", "LiBai's: every checkpoint", "the newest periodic checkpoints "
              "kept, older ones deleted only once a newer one is committed (also on LiBai 0.1.1, which "
              "ignores the key)", LIBAI_MAIN),
    ConfigKey("train.preemption.enabled", "true", "on one of train.preemption.signals the ranks stop together "
              "after the next step, commit its checkpoint and exit with 143 (false: the signal ends the rank, as "
              "in LiBai)", PLUGIN),
    ConfigKey("train.preemption.signals", '["SIGTERM", "SIGUSR1"]', "the signals that preempt (names or numbers; "
              "not SIGKILL, SIGSTOP or SIGALRM)", PLUGIN),
    ConfigKey("train.preemption.grace_s", "25", "seconds from the first signal until a rank ends at the latest, "
              "saved or not (124)", PLUGIN),
    ConfigKey("train.load_weight", '""', "initial weights (a checkpoint folder), loaded unless the run resumes "
              "from a checkpoint (LiBai 0.1.1 reads it only under --resume)", LIBAI),
    ConfigKey("train.num_accumulation_steps", "LiBai's: 1", "in eager mode the learning rate steps once per "
              "optimizer step, and train.checkpointer.period must be a multiple of it", LIBAI),
    ConfigKey("train.dist.pipeline_num_layers", "LiBai's", "checked against the model's layers with "
              "ConsistentBatchTrainer: a stage left without layers is warned about, layers past it are refused",
              LIBAI),
    ConfigKey("graph.enabled", "LiBai's: false", "graph mode, with libai_ext.engine.GraphBase as "
              "graph.train_graph / graph.eval_graph", LIBAI),
    ConfigKey("tokenization.max_tensor_parallel_size", "8", 'with train.randomness="layout_invariant", the '
              "vocabulary is padded to a multiple of make_vocab_size_divisible_by x this, the same on every "
              "tensor-parallel size dividing it", PLUGIN),
    ConfigKey("dataloader.train.mixup_func", "the config's", 'with train.randomness="layout_invariant", mixup '
              'runs once on the global batch and its mode must be "batch"; null turns mixup off', LIBAI),
    ConfigKey("dataloader.train.sampler", "none", "a sampler of the config's own is kept, with a log line: the "
              "layout-invariant data order then does not apply", LIBAI),
    ConfigKey("dataloader.train.collate_fn", "LiBai's", 'probed once under "layout_invariant": a collate '
              "function that draws random numbers is refused with an error that names it", LIBAI),
    ConfigKey("graph.global_mode", "none: off", "LiBai main's, handed by its build_graph to the train graph: "
              "libai_ext.engine.GraphBase traces it in OneFlow's global view when enabled (LiBai 0.1.1 ignores "
              "it)", LIBAI_MAIN),
    ConfigKey("graph.auto_parallel", "none: off", "LiBai main's, handed by its build_graph to both graphs: "
              "libai_ext.engine.GraphBase runs OneFlow's auto-parallel search when enabled (LiBai 0.1.1 ignores "
              "it)", LIBAI_MAIN),
    ConfigKey("train.rdma_enabled", "false", "LiBai main's; filled in when a config written for LiBai 0.1.1 "
              "lacks it (RDMA needs InfiniBand)", LIBAI_MAIN),
    ConfigKey("train.dist.device_type", "the host's device kind", "LiBai main's; filled in when a config "
              "written for LiBai 0.1.1 lacks it", LIBAI_MAIN),
    ConfigKey("train.input_placement_device", "the host's device kind", "LiBai main's; filled in when a config "
              "written for LiBai 0.1.1 lacks it", LIBAI_MAIN),
)

# What the tools call "stock" (train.trainer=libai.engine.DefaultTrainer): LiBai's trainer, not LiBai's tool.
STOCK_TRAINER = "libai.engine.DefaultTrainer"
STOCK_MEANING = ("stock: LiBai's own DefaultTrainer, run through libai_ext's train_net, so with libai_ext's repairs "
                 "of LiBai's CPU and start-up traps (libai_ext.apply_patches) and its seeding (train.seed, "
                 "train.seed_scope); LiBai's own tools/train_net.py seeds seed + rank (LiBai main) or nothing (0.1.1)")


def is_stock(trainer):
    """``train.trainer`` (a dotted path or a class) names LiBai's own DefaultTrainer."""
    name = trainer if isinstance(trainer, str) else f"{trainer.__module__}.{trainer.__qualname__}"
    return name in (STOCK_TRAINER, "libai.engine.default.DefaultTrainer")


NAME_WIDTH = 30


def plugin_keys():
    """The keys libai_ext defines (a typo of one is refused)."""
    return frozenset(key.name for key in KEYS if key.owner == PLUGIN)


def key_names():
    return frozenset(key.name for key in KEYS)


def help_text(width=96):
    """One entry per key for ``--help``: name, meaning, ``(default ...)``."""
    lines = []
    for key in KEYS:
        text = f"{key.meaning} (default {key.default})"
        body = textwrap.wrap(text, width=width - NAME_WIDTH - 2)
        lines.append(f"  {key.name:<{NAME_WIDTH}}{body[0]}" if len(key.name) < NAME_WIDTH
                     else f"  {key.name}\n  {'':<{NAME_WIDTH}}{body[0]}")
        lines += [f"  {'':<{NAME_WIDTH}}{line}" for line in body[1:]]
    return "\n".join(lines)
