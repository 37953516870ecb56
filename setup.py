"""Build torch_xccl: libxccl (the core, through CMake) plus one torch extension, torch_xccl._C.

    pip install --no-build-isolation .        # regular install against the installed torch
    pip install --no-build-isolation -e .     # editable install for development

--no-build-isolation is required: the extension must be compiled against the torch that is
already installed (pip must never fetch one). MAX_JOBS bounds the parallel build (default 2).

Layout produced:  torch_xccl/_C*.so and torch_xccl/_xdev_C*.so  (rpath $ORIGIN/lib),
                  torch_xccl/lib/libxccl.so.0, torch_xccl/lib/libxdev.so.0, and
                  torch_xccl/bin/xccl-topo (where CLI11 is installed; the `xccl-topo` command)

Two extensions: torch_xccl._C (the c10d backend, links libxccl) and torch_xccl._xdev_C (the
xdev device inside torch through PrivateUse1, csrc/torch_xdev/, links only libxdev).
"""
import glob
import os
import re
import shutil
import subprocess
import sys

from setuptools import setup

# The build needs torch, not our autoload hook: an earlier install whose checkout has moved
# or gone leaves torch's entry point naming a module that no longer exists, and importing
# torch would fail before this build could replace it.
os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

try:
    from torch.utils.cpp_extension import BuildExtension, CppExtension
except ImportError:  # pragma: no cover - a clear message instead of a traceback
    sys.exit("torch_xccl: torch must be installed first, then use "
             "`pip install --no-build-isolation .`")

ROOT = os.path.dirname(os.path.abspath(__file__))
# XCCL_CORE_BUILD: an existing CMake build of the core to take libxccl/libxdev from (built
# there, not configured again; scripts/gpu_check.sh shares its CUDA build this way).
CORE_BUILD = os.environ.get("XCCL_CORE_BUILD") or os.path.join(ROOT, "build-plugin", "core")
REUSE_CORE = bool(os.environ.get("XCCL_CORE_BUILD"))


def read_version() -> str:
    """The one version source: XCCL_MAJOR/MINOR/PATCH in the public header (CMake reads it too)."""
    with open(os.path.join(ROOT, "csrc", "collectives", "include", "xccl.h")) as f:
        parts = dict(re.findall(r"^#define XCCL_(MAJOR|MINOR|PATCH) (\d+)$", f.read(), re.M))
    return f"{parts['MAJOR']}.{parts['MINOR']}.{parts['PATCH']}"


VERSION = read_version()
with open(os.path.join(ROOT, "torch_xccl", "_version.py"), "w") as f:  # generated, not in git
    f.write(f'__version__ = "{VERSION}"  # written by setup.py from xccl.h\n')
BUNDLED = ("libxccl", "libxdev")  # shared libraries copied next to the extensions


def build_core():
    """Configure and build libxccl and the device runtime it links (libxdev) with CMake."""
    jobs = os.environ.get("MAX_JOBS", "2")
    os.makedirs(CORE_BUILD, exist_ok=True)
    cfg = ["cmake", "-S", ROOT, "-B", CORE_BUILD, "-DCMAKE_BUILD_TYPE=Release",
           "-DXCCL_BUILD_TESTS=OFF", "-DXCCL_BUILD_TOOLS=OFF"]
    if not REUSE_CORE:
        subprocess.check_call(cfg)
    subprocess.check_call(["cmake", "--build", CORE_BUILD, "--target", "xccl", "xdev",
                           "-j", jobs])
    # xccl-topo (the `xccl-topo` command) exists where CMake found CLI11.
    if subprocess.call(["cmake", "--build", CORE_BUILD, "--target", "xccl-topo", "-j", jobs],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0:
        print("torch_xccl: xccl-topo not built (CLI11 missing: apt install libcli11-dev)")
    # The libfabric network plugin (XCCL_NET_PLUGIN=libfabric) exists where CMake found
    # libfabric; bundled next to libxccl, whose dlopen looks there first.
    if subprocess.call(["cmake", "--build", CORE_BUILD, "--target", "xccl_net_libfabric", "-j",
                        jobs], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) != 0:
        print("torch_xccl: the libfabric network plugin not built (apt install libfabric-dev)")
    libs = []
    for name in BUNDLED:
        found = sorted(glob.glob(os.path.join(CORE_BUILD, name + ".so*")))
        if not found:
            raise RuntimeError(f"{name}.so was not produced in {CORE_BUILD}")
        libs += found
    return libs


class BuildWithCore(BuildExtension):
    """Builds libxccl and libxdev first, links the extension to them, bundles both next to
    the extension (one copy of each per process: the device runtime's state is shared)."""

    def finalize_options(self):
        super().finalize_options()
        # Objects in the checkout (build-plugin/temp), not in pip's temporary directory: ninja
        # rebuilds only what changed, and ccache (scripts/ccache_env.sh), which takes paths
        # relative to the compiler's working directory, then sees the same command in every
        # checkout, so a fresh clone's build comes from the cache.
        self.build_temp = os.path.join(ROOT, "build-plugin", "temp")

    def run(self):
        self._core_libs = build_core()
        super().run()
        for ext in self.extensions:
            dest = os.path.join(os.path.dirname(self.get_ext_fullpath(ext.name)), "lib")
            os.makedirs(dest, exist_ok=True)
            for lib in BUNDLED:
                real = os.path.realpath(os.path.join(CORE_BUILD, lib + ".so"))
                for name in (lib + ".so", lib + ".so.0"):  # the soname is what the loader wants
                    target = os.path.join(dest, name)
                    if os.path.lexists(target):
                        os.remove(target)
                    shutil.copy2(real, target)
            plugin = os.path.join(CORE_BUILD, "libxccl-net-libfabric.so")
            if os.path.exists(plugin):
                shutil.copy2(plugin, os.path.join(dest, "libxccl-net-libfabric.so"))
            topo = os.path.join(CORE_BUILD, "tools", "xccl-topo", "xccl-topo")
            if os.path.exists(topo):
                bindir = os.path.join(os.path.dirname(dest), "bin")
                os.makedirs(bindir, exist_ok=True)
                shutil.copy2(topo, os.path.join(bindir, "xccl-topo"))


# Unity build (TORCH_XCCL_UNITY_BUILD, default 1): torch's headers are most of the cost of
# every translation unit (about 28 s of CPU each here, 62 s with -g), so each extension is
# compiled as MAX_JOBS files that each include a share of its sources: 88 s of CPU for the
# whole backend instead of 16 x 28. 0 compiles file by file (quicker to rebuild one file).
UNITY = os.environ.get("TORCH_XCCL_UNITY_BUILD", "1") != "0"
UNITY_DIR = os.path.join(ROOT, "build-plugin", "unity")
# No debug information: -g (from Python's CFLAGS) more than doubles the compile time of a
# torch translation unit. TORCH_XCCL_DEBUG_INFO=1 keeps it.
OPT = ["-O2"] if os.environ.get("TORCH_XCCL_DEBUG_INFO") == "1" else ["-O2", "-g0"]


def sources(name, folder):
    """The extension's sources, or its unity files (rewritten only when their text changes,
    so that an unchanged tree does not rebuild)."""
    files = sorted(glob.glob(os.path.join(folder, "*.cpp")))
    if not UNITY or len(files) < 2:
        return files
    chunks = max(1, min(int(os.environ.get("MAX_JOBS", "2")), len(files)))
    groups = [[] for _ in range(chunks)]
    sizes = [0] * chunks
    for f in sorted(files, key=os.path.getsize, reverse=True):  # balance by size
        i = sizes.index(min(sizes))
        groups[i].append(f)
        sizes[i] += os.path.getsize(f)
    os.makedirs(UNITY_DIR, exist_ok=True)
    out = []
    for i, group in enumerate(groups):
        path = os.path.join(UNITY_DIR, f"{name}_{i}.cpp")
        text = "// generated by setup.py (TORCH_XCCL_UNITY_BUILD=0 to compile file by file)\n" + \
            "".join(f'#include "{os.path.relpath(os.path.join(ROOT, f), UNITY_DIR)}"\n'
                    for f in sorted(group))  # relative: the same text in every checkout
        if not os.path.exists(path) or open(path).read() != text:
            with open(path, "w") as fh:
                fh.write(text)
        out.append(os.path.relpath(path, ROOT))
    return out


ext = CppExtension(
    name="torch_xccl._C",
    # the backend: one concern per file (ProcessGroupXCCL.hpp lists them)
    sources=sources("_C", os.path.join("csrc", "process_group_xccl")),
    include_dirs=[os.path.join(ROOT, "csrc", "collectives", "include"),
                  os.path.join(ROOT, "csrc", "xdev", "include")],
    library_dirs=[CORE_BUILD],
    libraries=["xccl", "xdev"],
    extra_compile_args=OPT,
    extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
)

# The xdev device (PrivateUse1): includes torch and the runtime header, never the collectives.
xdev_ext = CppExtension(
    name="torch_xccl._xdev_C",
    sources=sources("_xdev_C", os.path.join("csrc", "torch_xdev")),
    include_dirs=[os.path.join(ROOT, "csrc", "xdev", "include")],
    library_dirs=[CORE_BUILD],
    libraries=["xdev"],
    extra_compile_args=OPT,
    extra_link_args=["-Wl,-rpath,$ORIGIN/lib"],
)

setup(
    name="torch_xccl",
    version=VERSION,
    packages=["torch_xccl", "torch_xccl.launcher", "torch_xccl.integrations"],
    # `import torch` imports torch_xccl through this module (entry point group
    # torch.backends, see pyproject.toml) so that device="xdev" works without an import.
    py_modules=["_torch_xccl_autoload"],
    ext_modules=[ext, xdev_ext],
    cmdclass={"build_ext": BuildWithCore.with_options(use_ninja=True)},
    zip_safe=False,
)
