"""Every attribute of OneFlow, LiBai and flowvision a short run changes, against what the registry names.

Run on 1 rank: ``patch_footprint.py OUT.json [--tool check_batch] -- <the tool's arguments>`` (default tool:
libai-ext-train).  Snapshots every attribute of every loaded
``oneflow.*``, ``libai.*`` and ``flowvision.*`` module and of every class they hold, runs the tool in
this process, snapshots again, and writes ``{"changed": [...], "named": [...], "unnamed": [...]}``:
the dotted names that differ (under every name they are reachable by), those
``libai_ext.applied_patches()`` names, and the rest; then undoes every patch and writes what still
differs (``left_after_restore``).
"""
import argparse
import json
import sys

ROOTS = ("oneflow", "libai", "flowvision")
# Upstream's own run-time state, written by LiBai and OneFlow themselves in a stock run (not patches).
UPSTREAM_STATE = {
    "libai.utils.distributed._DIST_UTIL": "LiBai's setup_dist_util stores the layout",
}


def _owned(name):
    return name.split(".", 1)[0] in ROOTS


def snapshot():
    """``{dotted name: value}`` for every attribute of the loaded modules and of their classes."""
    found = {}
    for module_name, module in list(sys.modules.items()):
        if module is None or not _owned(module_name):
            continue
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for key, value in list(namespace.items()):
            if key.startswith("__") and key.endswith("__"):
                continue
            found[f"{module_name}.{key}"] = value
            if isinstance(value, type) and _owned(getattr(value, "__module__", "") or ""):
                for attribute, member in list(vars(value).items()):
                    if attribute in ("__doc__", "__dict__", "__weakref__", "__module__", "__abstractmethods__",
                                     "_abc_impl", "__parameters__"):
                        continue
                    found[f"{module_name}.{key}.{attribute}"] = member
    return found


def differences(before, after):
    changed = []
    for name, value in after.items():
        if name not in before:
            owner = name.rsplit(".", 1)[0]
            if owner in before:  # an attribute added to a module or class that was there before
                changed.append(name)
            continue
        old = before[name]
        if old is value:
            continue
        try:
            same = type(old) is type(value) and isinstance(old, (int, float, str, bytes, bool, tuple, frozenset)) \
                and old == value
        except Exception:
            same = False
        if not same:
            changed.append(name)
    changed += [name for name in before if name not in after and name.rsplit(".", 1)[0] in after]
    return sorted(set(changed) - set(UPSTREAM_STATE))


def main():
    split = sys.argv.index("--")
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--tool", default="train_net", choices=("train_net", "check_batch"))
    options = parser.parse_args(sys.argv[1:split])
    argv = sys.argv[split + 1:]

    import flowvision  # noqa: F401
    import libai_ext
    from libai.config import LazyConfig
    from libai_ext.engine import launch  # noqa: F401 (loads OneFlow, LiBai and libai_ext's runtime)

    config_file = argv[argv.index("--config-file") + 1]
    LazyConfig.load(config_file)  # the config's own imports (models, datasets) before the first snapshot
    before = snapshot()
    if options.tool == "train_net":
        from libai_ext.cli import train_net
        code = train_net.main(argv)
    else:
        from libai_ext.cli import check_batch
        code = check_batch.main(argv)
    after = snapshot()
    changed = differences(before, after)
    named = set()
    for entry in libai_ext.applied_patches():
        named.update(entry["names"])
    patches = sorted({entry["patch"] for entry in libai_ext.applied_patches()})
    from libai_ext.compat import patching

    patching.restore_all()
    with open(options.out, "w") as f:
        json.dump({"code": code, "changed": changed, "named": sorted(named & set(changed)),
                   "unnamed": [name for name in changed if name not in named], "patches": patches,
                   "left_after_restore": differences(before, snapshot()),
                   "in_force_after_restore": len(libai_ext.applied_patches())}, f, indent=1)


if __name__ == "__main__":
    main()
