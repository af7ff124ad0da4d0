"""The package as a user installs it: ``pip wheel .`` builds a wheel that installs into a fresh venv beside
the installed LiBai, and its tools run from there.

What proves the wheel complete, not this checkout: the wheel holds every module of ``libai_ext/``, the
compiled host kernel and the keyed-dropout op (which loads in the fresh venv), its metadata the licence, the version and every console script; the fresh venv
sees the dependencies of this test's venv (OneFlow, LiBai, ...) through a folder that links each of them
but not libai_ext, so pip resolves the wheel's requirements against them with no index (beside pip's LiBai
0.1.1 here) and installs libai_ext alone; the tools then run from another folder with no ``PYTHONPATH``,
and import libai_ext from the fresh venv.

The wheel is built with this venv's setuptools (``--no-build-isolation``), as ``make setup`` builds the
package, so the test needs no network.
"""
import email
import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import zipfile

import pytest

from conftest import ROOT

import libai_ext


def run(*command, cwd, env=None, timeout=300):
    out = subprocess.run([str(word) for word in command], capture_output=True, text=True, cwd=str(cwd),
                         timeout=timeout, env=env)
    assert out.returncode == 0, f"{' '.join(map(str, command))}\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def console_scripts():
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        section = f.read().split("[project.scripts]\n", 1)[1].split("\n[", 1)[0]
    return dict(re.findall(r'^([\w-]+) = "([\w.:]+)"$', section, flags=re.M))


def clean_tree(folder):
    """This checkout's files as a fresh clone has them (tracked, or new and not ignored): a build/ folder
    left by an earlier build would hand setuptools stale copies of what the config no longer packages."""
    listed = run("git", "ls-files", "--cached", "--others", "--exclude-standard", "-z", cwd=ROOT).stdout
    for path in filter(None, listed.split("\0")):
        if os.path.isfile(os.path.join(ROOT, path)):
            os.makedirs(os.path.dirname(os.path.join(folder, path)) or folder, exist_ok=True)
            shutil.copy2(os.path.join(ROOT, path), os.path.join(folder, path))
    return folder


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    source, out_dir = clean_tree(tmp_path_factory.mktemp("source")), tmp_path_factory.mktemp("wheel")
    run(sys.executable, "-m", "pip", "wheel", source, "--no-deps", "--no-build-isolation", "-w", out_dir, cwd=out_dir)
    wheels = [name for name in os.listdir(out_dir) if name.endswith(".whl")]
    assert len(wheels) == 1, wheels
    return out_dir / wheels[0]


def test_the_wheel_holds_every_module_the_kernel_the_licence_and_the_scripts(wheel):
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = f"libai_ext-{libai_ext.__version__}.dist-info"
        metadata = email.message_from_string(archive.read(f"{info}/METADATA").decode())
        entry_points = archive.read(f"{info}/entry_points.txt").decode()
        licence = next(archive.read(n).decode() for n in names if n.startswith(info) and n.endswith("/LICENSE"))
    modules = {os.path.relpath(os.path.join(folder, name), ROOT).replace(os.sep, "/")
               for folder, _, files in os.walk(os.path.join(ROOT, "libai_ext")) for name in files
               if name.endswith(".py")}
    assert len(modules) > 80 and modules - names == set()
    assert any(re.fullmatch(r"libai_ext/random/_counter_kernel\..*\.so", name) for name in names), sorted(names)
    assert any(re.fullmatch(r"libai_ext/random/keyed_op/lib/_keyed_dropout-\w+\..*\.so", name) for name in names)
    name = re.sub(r"[-_.]+", "-", metadata["Name"]).lower()  # as pip normalises it
    assert (name, metadata["Version"], metadata["License"]) == ("libai-ext", libai_ext.__version__, "Apache-2.0")
    assert "Apache License" in licence and "Version 2.0, January 2004" in licence
    assert {f"{name} = {target}" for name, target in console_scripts().items()} <= set(entry_points.splitlines())
    tools = {name[:-3] for name in os.listdir(os.path.join(ROOT, "libai_ext", "cli"))
             if name.endswith(".py") and name not in ("__init__.py", "common.py")}
    assert {target.split(":")[0].rsplit(".", 1)[1] for target in console_scripts().values()} == tools


def dependencies_without_libai_ext(folder):
    """A folder linking every entry of this venv's site-packages but libai_ext's own (its modules, its
    dist-info and an editable install's hooks)."""
    site = sysconfig.get_paths()["purelib"]
    os.makedirs(folder)
    for name in os.listdir(site):
        if "libai_ext" in name or name.startswith("__editable__"):
            continue
        os.symlink(os.path.join(site, name), os.path.join(folder, name))
    return folder


def test_the_wheel_installs_beside_the_installed_libai_and_its_tools_run(wheel, tmp_path):
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp_path)
    python = venv / "bin" / "python"
    fresh_site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
                     cwd=tmp_path).stdout.strip()
    deps = dependencies_without_libai_ext(tmp_path / "deps")
    with open(os.path.join(fresh_site, "dependencies.pth"), "w") as f:
        f.write(f"import site; site.addsitedir({str(deps)!r})\n")
    env = {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}
    missing = run(python, "-c", "import importlib.util as u; print(u.find_spec('libai_ext'))", cwd=tmp_path, env=env)
    assert missing.stdout.strip() == "None"  # nothing of this checkout can stand in for the wheel
    # No --no-deps, no index: every requirement must be met by what is installed (LiBai, OneFlow, ...).
    installed = run(sys.executable, "-m", "pip", "--python", python, "install", "--no-index", wheel, cwd=tmp_path,
                    env=env)
    assert re.search(r"^Installing collected packages: libai[-_]ext$", installed.stdout, re.M), installed.stdout
    libai = re.search(r"^Requirement already satisfied: libai>=0\.1\.1 in .*\((\S+)\)$", installed.stdout, re.M)
    assert libai and libai.group(1) == importlib.metadata.version("libai"), installed.stdout  # 0.1.1, or main's

    scripts = venv / "bin"
    helped = run(scripts / "libai-ext-train", "--help", cwd=tmp_path, env=env)
    assert helped.stdout.startswith("usage: libai-ext-train") and "train.randomness" in helped.stdout
    for name in console_scripts():
        assert run(scripts / name, "--version", cwd=tmp_path, env=env).stdout == f"libai_ext {libai_ext.__version__}\n"
    refused = subprocess.run([scripts / "libai-ext-train", "--config-file", "missing.py"], capture_output=True,
                             text=True, cwd=tmp_path, env=env, timeout=60)
    assert (refused.returncode, len(refused.stderr.splitlines())) == (2, 1), refused.stderr
    imported = run(python, "-c", (
        "import importlib, pkgutil, libai_ext\n"
        "from libai_ext.random import counter_rng, keyed_op\n"
        "names = [m.name for m in pkgutil.walk_packages(libai_ext.__path__, 'libai_ext.')]\n"
        "[importlib.import_module(name) for name in names]\n"
        "print(libai_ext.__file__, len(names), counter_rng._counter_kernel is not None, keyed_op.load())"),
        cwd=tmp_path, env=env)
    where, count, kernel, op = imported.stdout.split()[-4:]
    assert where.startswith(fresh_site) and int(count) > 80 and kernel == op == "True", imported.stdout
