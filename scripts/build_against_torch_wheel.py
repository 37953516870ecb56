#!/usr/bin/env python3
"""Compile and link torch_xccl's two extensions against another torch release without
installing it: its headers and shared libraries come straight out of the wheel.

The installed torch is the one the project builds with (2.13.0 here); this checks a second
release the plugin must support (2.11.0+cu130 on the GPU machines, a CUDA build: its c10
CUDA headers are what the CUDA branches of the backend compile against there). Every object
is linked with --no-undefined against the wheel's libc10 / libtorch / libtorch_cpu /
libtorch_python, libpython and the core libraries in ./build, so an API or symbol the other
release lacks fails here, at build time, naming it. Nothing is run (the wheel's torch is not
importable without its CUDA dependencies).

Usage:
  pip download torch==2.11.0 --no-deps -d /tmp/t211
  python scripts/build_against_torch_wheel.py /tmp/t211/torch-2.11.0-*.whl [--jobs 2]
"""
import argparse
import concurrent.futures as cf
import glob
import os
import subprocess
import sys
import sysconfig
import tempfile
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LIBS = ("libc10.so", "libtorch.so", "libtorch_cpu.so", "libtorch_python.so")
EXTENSIONS = {
    "_C": (os.path.join("csrc", "process_group_xccl"), ["xccl", "xdev"],
           [os.path.join("csrc", "collectives", "include"), os.path.join("csrc", "xdev", "include")]),
    "_xdev_C": (os.path.join("csrc", "torch_xdev"), ["xdev"],
                [os.path.join("csrc", "xdev", "include")]),
}


def extract(wheel, dest):
    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist()
                 if n.startswith("torch/include/") or n == "torch/version.py"
                 or n in {f"torch/lib/{lib}" for lib in LIBS}]
        z.extractall(dest, names)
    version = {}
    exec(open(os.path.join(dest, "torch", "version.py")).read(), version)
    return version["__version__"]


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--core-build", default=os.path.join(ROOT, "build"),
                    help="where libxccl.so and libxdev.so are (cmake build dir)")
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="torchwheel-")
    version = extract(a.wheel, work)
    inc = os.path.join(work, "torch", "include")
    libdir = os.path.join(work, "torch", "lib")
    py_inc = sysconfig.get_paths()["include"]
    py_lib = sysconfig.get_config_var("LIBDIR")
    py_ver = sysconfig.get_config_var("LDVERSION") or sysconfig.get_python_version()
    print(f"torch {version} from {os.path.basename(a.wheel)}; objects in {work}")
    ok = True
    for name, (src_dir, core_libs, extra_inc) in EXTENSIONS.items():
        sources = sorted(glob.glob(os.path.join(ROOT, src_dir, "*.cpp")))
        flags = ["-std=c++20", "-O0", "-fPIC", "-D_GLIBCXX_USE_CXX11_ABI=1",
                 "-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={name}",
                 "-I", inc, "-I", os.path.join(inc, "torch", "csrc", "api", "include"),
                 "-I", py_inc] + [f"-I{os.path.join(ROOT, d)}" for d in extra_inc]
        objs = [os.path.join(work, f"{name}-{os.path.basename(s)}.o") for s in sources]
        with cf.ThreadPoolExecutor(a.jobs) as pool:
            results = list(pool.map(lambda so: run(["g++", *flags, "-c", so[0], "-o", so[1]]),
                                    zip(sources, objs)))
        for src, (rc, out) in zip(sources, results):
            status = "ok" if rc == 0 else "FAILED"
            print(f"  compile {os.path.relpath(src, ROOT)}: {status}")
            if rc:
                ok = False
                print(out[-4000:])
        if not ok:
            break
        target = os.path.join(work, f"{name}.so")
        link = ["g++", "-shared", "-o", target, *objs, "-Wl,--no-undefined",
                f"-L{libdir}", "-lc10", "-ltorch", "-ltorch_cpu", "-ltorch_python",
                f"-L{a.core_build}", *[f"-l{lib}" for lib in core_libs],
                f"-L{py_lib}", f"-lpython{py_ver}"]
        rc, out = run(link)
        print(f"  link {name}.so with --no-undefined against torch {version}: "
              f"{'ok' if rc == 0 else 'FAILED'}")
        if rc:
            ok = False
            print(out[-6000:])
            break
    print("result:", "builds and links against torch " + version if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
