"""The files of a committed checkpoint, and how a folder is checked against its commit record.

Layout (docs/checkpoints.md): LiBai's entries, plus ``libai_ext/`` holding ``pickled_data`` (LiBai's own Checkpointer
loads every entry of a folder, so it needs one), ``rng_state/rank_<r>.pkl`` and ``manifest.json`` (written last:
every other file with its size and CRC-32). A save is written as ``<name>.uncommitted`` and renamed once the manifest
is in place; a folder being replaced or deleted is first renamed ``<name>.retired``. Nothing here imports OneFlow.
"""
import ctypes
import ctypes.util
import json
import os
import re
import sys
import zlib

EXTENSION_ENTRY = "libai_ext"
MANIFEST = f"{EXTENSION_ENTRY}/manifest.json"
RNG_STATE_DIR = f"{EXTENSION_ENTRY}/rng_state"
STAGING_SUFFIX = ".uncommitted"
RETIRED_SUFFIX = ".retired"
MANIFEST_FORMAT = "libai_ext-checkpoint/1"
LAST_CHECKPOINT = "last_checkpoint"  # LiBai's: the name of the checkpoint a resume loads
CHECKPOINT_PREFIX = "model"  # LiBai's periodic checkpoints: model_<iteration, 7 digits>
_CHUNK = 8 << 20
_NUMBERED = re.compile(r"_(\d+)$")


class CheckpointDamaged(RuntimeError):
    """A checkpoint that cannot be resumed; the message names the folder and each bad file."""

    def __init__(self, folder, problems):
        self.folder, self.problems = folder, list(problems)
        super().__init__(f"checkpoint {folder} is damaged: " + "; ".join(self.problems))


def staging_name(name):
    return name + STAGING_SUFFIX


def is_staging(name):
    return name.endswith(STAGING_SUFFIX)


def is_retired(name):
    return name.endswith(RETIRED_SUFFIX)


def numbered_iteration(name):
    """The iteration in a name like ``model_0000009``; None for names by role (``model_final``)."""
    match = _NUMBERED.search(name)
    return int(match.group(1)) if match else None


def rng_state_path(folder, rank):
    return os.path.join(folder, RNG_STATE_DIR, f"rank_{rank}.pkl")


def relative_files(folder):
    """Every file under ``folder`` but the manifest, as sorted ``/``-separated relative paths."""
    found = []
    for root, _, files in os.walk(folder):
        for file_name in files:
            relative = os.path.relpath(os.path.join(root, file_name), folder).replace(os.sep, "/")
            if relative != MANIFEST and not relative.endswith(".tmp"):
                found.append(relative)
    return sorted(found)


def crc32_of(path):
    crc = 0
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(_CHUNK), b""):
            crc = zlib.crc32(chunk, crc)
    return f"{crc:08x}"


def _fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def flush_to_disk(folder):
    """Make every file under ``folder`` durable before the commit renames it, so a node failure cannot leave a committed
    name over files that never reached the disk. Linux: one ``syncfs``, far cheaper than a ``fsync`` per file
    (``benchmarks/checkpoint_cost.py``); elsewhere a ``fsync`` per file."""
    if _syncfs(folder):
        return
    for root, _, files in os.walk(folder):
        for file_name in files:
            _fsync_file(os.path.join(root, file_name))
        fsync_dir(root)


def _syncfs(path):
    if not sys.platform.startswith("linux"):
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        return libc.syncfs(fd) == 0
    finally:
        os.close(fd)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def build_manifest(folder, *, checksums, iteration=None, world_size=None):
    """The commit record of ``folder``: every file with its size (and CRC-32 with ``checksums``)."""
    files = {}
    for relative in relative_files(folder):
        path = os.path.join(folder, relative)
        files[relative] = {"size": os.path.getsize(path)}
        if checksums:
            files[relative]["crc32"] = crc32_of(path)
    return {"format": MANIFEST_FORMAT, "iteration": iteration, "world_size": world_size,
            "checksum": "crc32" if checksums else None, "files": files}


def write_json_atomically(path, value):
    """``path`` holds either its old content or all of ``value``, never a part."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(value, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def write_text_atomically(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def checkpoint_name(iteration, prefix=CHECKPOINT_PREFIX):
    """The folder name LiBai gives the checkpoint of ``iteration``."""
    return f"{prefix}_{int(iteration):07d}"


def read_last_checkpoint(save_dir):
    """The checkpoint name ``last_checkpoint`` holds; None when there is none (or it is empty)."""
    try:
        with open(os.path.join(save_dir, LAST_CHECKPOINT)) as f:
            return f.read().strip() or None
    except OSError:
        return None


def write_last_checkpoint(save_dir, name):
    """Point ``last_checkpoint`` at ``name``, atomically."""
    write_text_atomically(os.path.join(save_dir, LAST_CHECKPOINT), name)


def read_manifest(folder):
    """The manifest of ``folder``; None when it has none (never committed, or written by stock LiBai)."""
    path = os.path.join(folder, MANIFEST)
    if not os.path.isfile(path):
        return None
    try:
        with open(path) as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise CheckpointDamaged(folder, [f"{MANIFEST} cannot be read ({e})"]) from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT or \
            not isinstance(manifest.get("files"), dict):
        raise CheckpointDamaged(folder, [f"{MANIFEST} is not a {MANIFEST_FORMAT} manifest"])
    return manifest


def manifest_problems(folder, manifest, *, checksums):
    """What in ``folder`` differs from ``manifest``: one message per bad file, naming it."""
    problems = []
    for relative, record in sorted(manifest["files"].items()):
        path = os.path.join(folder, relative)
        if not os.path.isfile(path):
            problems.append(f"{relative} is missing")
            continue
        size = os.path.getsize(path)
        if size != record.get("size"):
            problems.append(f"{relative} has {size} bytes, the manifest says {record.get('size')}")
        elif checksums and "crc32" in record and crc32_of(path) != record["crc32"]:
            problems.append(f"{relative} fails its CRC-32 check (the content changed after the commit)")
    world_size = manifest.get("world_size")
    if isinstance(world_size, int):
        missing = [r for r in range(world_size) if f"{RNG_STATE_DIR}/rank_{r}.pkl" not in manifest["files"]]
        if missing:
            problems.append(f"the manifest lists no random state for ranks {missing}")
    return problems


# OneFlow's tensor files: ``<entry>/<tensor dir>/out`` (raw bytes) beside ``meta`` (shape and dtype as text).
_META_DTYPE_BYTES = {"kChar": 1, "kInt8": 1, "kUInt8": 1, "kBool": 1, "kFloat16": 2, "kBFloat16": 2,
                     "kInt32": 4, "kFloat": 4, "kInt64": 8, "kDouble": 8}


def tensor_file_problems(folder):
    """Entries without their index file and tensor files whose size disagrees with their ``meta``.

    The check for folders without a manifest (stock LiBai, older libai_ext), and what an error names when OneFlow's
    loader fails with a bare assertion."""
    problems = []
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        if not os.path.isdir(path) or entry == EXTENSION_ENTRY:
            continue
        if not os.path.isfile(os.path.join(path, "pickled_data")) and \
                not os.path.isfile(os.path.join(path, "snapshot_done")):
            problems.append(f"{entry}/ is incomplete (no pickled_data: its writer stopped before the end)")
        for root, _, files in os.walk(path):
            if "out" in files and "meta" in files:
                expected = _expected_size(os.path.join(root, "meta"))
                size = os.path.getsize(os.path.join(root, "out"))
                if expected is not None and size != expected:
                    relative = os.path.relpath(os.path.join(root, "out"), folder).replace(os.sep, "/")
                    problems.append(f"{relative} has {size} bytes, its meta says {expected}")
    return problems


def _expected_size(meta_path):
    try:
        with open(meta_path) as f:
            text = f.read()
    except OSError:
        return None
    dtype = re.search(r"data_type:\s*(\w+)", text)
    if dtype is None or dtype.group(1) not in _META_DTYPE_BYTES:
        return None
    count = 1
    for dim in re.findall(r"dim:\s*(\d+)", text):
        count *= int(dim)
    return count * _META_DTYPE_BYTES[dtype.group(1)]
