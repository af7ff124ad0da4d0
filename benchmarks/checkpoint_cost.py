"""What committed checkpoints cost: save and load with and without checksums, beside LiBai's own.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/checkpoint_cost.py --params 20 --repeats 3 \
        --out benchmarks/results/checkpoint_cost.md

One rank, one process: a stack of ``Linear`` layers holding ``--params`` million float32
parameters, trained one step with AdamW (so the optimizer holds two moments: the checkpoint is
about 3x the weights) and a LiBai-style scheduler.  Variants run interleaved ``--repeats`` times;
the table gives the median wall time of each and its ratio to LiBai's:

* save: LiBai's ``Checkpointer.save`` (in place) / ``CommittedCheckpointer.save`` with CRC-32
  checksums / without (sizes only).  The committed save also flushes the folder to disk
  (``syncfs``) before its rename;
* load: LiBai's ``Checkpointer.load`` / verify against the manifest and load, with checksums /
  sizes only.  The files were just written, so they are read from the page cache: the checksum's
  CPU cost, not a disk's;
* flush: one ``syncfs`` against a ``fsync`` of every file and folder, on a fresh copy.
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks.report import command_line, publish  # noqa: E402


def setup_single_rank():
    from libai.utils import distributed as dist
    from omegaconf import DictConfig

    dist.setup_dist_util(DictConfig({"data_parallel_size": 1, "tensor_parallel_size": 1,
                                     "pipeline_parallel_size": 1, "pipeline_num_layers": 1}))


def build(million_params, width=1024):
    import oneflow as flow

    placement, sbp = flow.placement("cpu", [0]), flow.sbp.broadcast
    layers = max(1, round(million_params * 1e6 / (width * width)))
    model = flow.nn.Sequential(*[flow.nn.Linear(width, width) for _ in range(layers)])
    model.to_global(placement=placement, sbp=sbp)
    optimizer = flow.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = flow.optim.lr_scheduler.StepLR(optimizer, step_size=100)
    model(flow.ones(2, width).to_global(placement=placement, sbp=sbp)).sum().backward()
    optimizer.step()
    scheduler.step()
    count = sum(p.numel() for p in model.parameters())
    return model, optimizer, scheduler, count


def timed(function):
    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def folder_bytes(folder):
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)


def fsync_every_file(folder):
    from libai_ext.checkpoint.files import fsync_dir

    for root, _, files in os.walk(folder):
        for name in files:
            fd = os.open(os.path.join(root, name), os.O_RDONLY)
            os.fsync(fd)
            os.close(fd)
        fsync_dir(root)


def measure(million_params, repeats, workdir):
    from libai.utils.checkpoint import Checkpointer

    from libai_ext.checkpoint.committed import CommittedCheckpointer
    from libai_ext.checkpoint.files import flush_to_disk

    model, optimizer, scheduler, count = build(million_params)
    parts = dict(optimizer=optimizer, lr_scheduler=scheduler)
    savers = {"LiBai": Checkpointer(model, os.path.join(workdir, "stock"), **parts),
              "committed, CRC-32": CommittedCheckpointer(model, os.path.join(workdir, "crc"), checksums=True, **parts),
              "committed, sizes only": CommittedCheckpointer(model, os.path.join(workdir, "sizes"), checksums=False,
                                                             **parts)}
    times = {f"{kind}: {name}": [] for kind in ("save", "load") for name in savers}
    times.update({"flush: syncfs": [], "flush: fsync per file": []})
    for _ in range(repeats):
        for name, saver in savers.items():
            # LiBai saves in place and keeps the tensor files of an earlier save of the same name: start clean.
            shutil.rmtree(os.path.join(saver.save_dir, "model_0000009"), ignore_errors=True)
            times[f"save: {name}"].append(timed(lambda: saver.save("model_0000009", iteration=9)))
        for name, saver in savers.items():
            folder = os.path.join(saver.save_dir, "model_0000009")
            if isinstance(saver, CommittedCheckpointer):
                load = lambda: (saver.verify(folder), Checkpointer.load(saver, folder))  # noqa: E731
            else:
                load = lambda: saver.load(folder)  # noqa: E731
            times[f"load: {name}"].append(timed(load))
        for name, flush in (("syncfs", flush_to_disk), ("fsync per file", fsync_every_file)):
            copy = os.path.join(workdir, "copy")
            shutil.rmtree(copy, ignore_errors=True)
            shutil.copytree(os.path.join(workdir, "crc", "model_0000009"), copy)
            times[f"flush: {name}"].append(timed(lambda: flush(copy)))
    size = folder_bytes(os.path.join(workdir, "crc", "model_0000009"))
    files = sum(len(f) for _, _, f in os.walk(os.path.join(workdir, "crc", "model_0000009")))
    return count, size, files, {name: statistics.median(values) for name, values in times.items()}


def report(count, size, files, medians, repeats):
    base = {"save": medians["save: LiBai"], "load": medians["load: LiBai"], "flush": medians["flush: syncfs"]}
    lines = [f"1 rank, median of {repeats}: {count / 1e6:.1f} M parameters, AdamW, {size / 2**20:.0f} MiB in "
             f"{files} files.", "",
             "| step | variant | seconds | ratio |", "|---|---|---|---|"]
    for name, seconds in medians.items():
        kind, variant = name.split(": ", 1)
        lines.append(f"| {kind} | {variant} | {seconds:.3f} | {seconds / base[kind]:.2f}x |")
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=float, default=20, help="million parameters (default 20)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workdir", default=None, help="where checkpoints are written (default: a temp folder)")
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    setup_single_rank()
    workdir = tempfile.mkdtemp(prefix="checkpoint_cost-", dir=args.workdir)
    try:
        count, size, files, medians = measure(args.params, args.repeats, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    command = command_line(sys.argv[:1] + argv) if argv is not None else None
    publish(report(count, size, files, medians, args.repeats), args.out,
            title="Committed checkpoints: save and load cost", command=command)


if __name__ == "__main__":
    main()
