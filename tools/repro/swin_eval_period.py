"""LiBai main's Swin ImageNet configs set `train.eval_period`, a key LiBai never reads.

    python tools/repro/swin_eval_period.py [LIBAI_SOURCE]   # LiBai main's folder or .tar.gz; one process, ~5 s

LiBai reads the evaluation period from `train.evaluation.eval_period` (its `configs/common/train.py` and
`DefaultTrainer.build_hooks`).  `configs/swin_imagenet.py` and `configs/swinv2_imagenet.py` assign 1562 to
`train.eval_period` instead: LazyConfig accepts the new key, and evaluation keeps the default period.  The other
image configs of the same tree (`vit_imagenet.py`, `swin_cifar100.py`...) set the key LiBai reads.  The configs are
read by stock LiBai's `LazyConfig`; libai_ext only finds LiBai's source when no argument names it
(`$LIBAI_MAIN_ARCHIVE`, else the archive the Makefile installs LiBai main from).
"""
import os
import sys
import tarfile
import tempfile

from _common import verdict

from libai.config import LazyConfig
from libai_ext.data.text_data import resolve_libai_source

CONFIGS = ("swin_imagenet.py", "swinv2_imagenet.py", "vit_imagenet.py")


def configs_folder(source):
    """LiBai's ``configs/`` folder: the source folder's, or the archive's extracted into a temporary folder."""
    if os.path.isdir(source):
        return os.path.join(source, "configs")
    target = tempfile.mkdtemp(prefix="libai-configs-")
    with tarfile.open(source) as archive:
        wanted = [m for m in archive.getmembers() if m.isfile() and "/configs/" in m.name and ".." not in m.name]
        for member in wanted:
            path = os.path.join(target, member.name.split("/configs/", 1)[1])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as out:
                out.write(archive.extractfile(member).read())
    return target


folder = configs_folder(resolve_libai_source(sys.argv[1] if len(sys.argv) > 1 else None))
stray = []
for name in CONFIGS:
    train = LazyConfig.load(os.path.join(folder, name)).train
    print(f"{name}: train.eval_period={train.get('eval_period')}, "
          f"train.evaluation.eval_period={train.evaluation.eval_period} (what LiBai reads)", flush=True)
    if "eval_period" in train:
        stray.append(name)
verdict(bool(stray), f"{', '.join(stray) or 'no config'} set train.eval_period, which LiBai does not read: "
                     "evaluation keeps the default period")
