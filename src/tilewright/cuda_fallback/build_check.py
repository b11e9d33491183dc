"""``tilewright build-check --arch sm_90a``: compile every CUDA kernel for an arch on any machine (no GPU needed) and
check the compiler's resource report and the SASS for the instructions the design relies on.

Per build: registers, spills, static + dynamic shared memory, and the SASS markers found. A build fails on a compile
error, a spill or stack frame, a "Potential Performance Loss" warning (C7504 setmaxnreg ignored with rdc, C7508
setmaxnreg ignored, C7509/C7515 wgmma serialized), or a missing marker. Kernels for another arch are listed as
skipped.
"""
from __future__ import annotations

import glob
import os
import re
import subprocess
import sys
import tempfile

from ..backends import kernel_modules
from .runtime import build


def _kernels() -> dict:
    """kernel source -> (archs it is built for, SASS markers every build must contain, builds() -> rows of (label,
    defines, dynamic smem bytes[, markers this build's SASS must contain besides the kernel's])): read from each
    registered CUDA family module and each kernel part (backends.kernel_modules: SOURCE, BUILD_CHECK_ARCHS,
    BUILD_CHECK_MARKERS, build_check_builds)."""
    return {m.SOURCE: (m.BUILD_CHECK_ARCHS, m.BUILD_CHECK_MARKERS, m.build_check_builds)
            for m in kernel_modules() if str(getattr(m, "SOURCE", "")).endswith(".cu")}


KERNELS = _kernels()
PERF_WARNINGS = re.compile(r"C75(04|08|09|10|15)|Potential Performance Loss", re.I)
COLUMNS = ("kernel", "build", "arch", "regs", "spills", "stack", "smem", "markers", "status")


def _disassembler() -> str | None:
    """cuobjdump from the CUDA toolkit, else the copy that ships in the triton wheel or an nvidia-* wheel."""
    extra = []
    try:
        import triton

        extra.append(os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump"))
    except ImportError:
        pass
    for base in sys.path:
        extra += glob.glob(os.path.join(base, "nvidia", "cu*", "bin", "cuobjdump"))
    return build.find_cuda_tool("cuobjdump", tuple(extra))


def sass(cubin: bytes) -> str | None:
    """SASS text of a cubin, or None when no cuobjdump is available."""
    tool = _disassembler()
    if tool is None:
        return None
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        proc = subprocess.run([tool, "-sass", f.name], capture_output=True, text=True, timeout=300)
    return proc.stdout if proc.returncode == 0 else None


def parse_ptxas(log: str) -> dict:
    """Registers, spill bytes, stack frame and static smem from ``ptxas -v`` output. A module with several kernels
    (the attention backward's dK / dV and dQ) reports the most registers, stack and static smem of any of them and
    the spill bytes of all of them: one spilling kernel fails the build."""
    info = {"regs": None, "spills": None, "stack": None, "static_smem": 0}
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    if regs:
        info["regs"] = max(regs)
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", log)
    if frames:
        info["stack"] = max(int(f[0]) for f in frames)
        info["spills"] = sum(int(f[1]) + int(f[2]) for f in frames)
    smem = [int(m) for m in re.findall(r"(\d+) bytes smem", log)]
    if smem:
        info["static_smem"] = max(smem)
    return info


def build_check(arch: str = "sm_90a", use_cache: bool = True, only: tuple | None = None) -> tuple[list[dict], bool]:
    """Compile every kernel under cuda_fallback/ for ``arch`` (or the sources named in ``only``); one row per build and
    whether all passed (a source no family registers is listed as skipped)."""
    rows: list[dict] = []
    ok = True
    tc = build.toolchain()
    sources = sorted(p.name for p in build.SOURCE_DIR.glob("*.cu") if only is None or p.name in only)
    if only is not None and set(only) - set(sources):
        raise ValueError(f"build_check: no kernel source {sorted(set(only) - set(sources))} in cuda_fallback/")
    for src in sources:
        archs, markers, builds = KERNELS.get(src, ((), (), lambda: []))
        if arch not in archs:
            rows.append(dict(kernel=src, build="-", arch=arch, regs="", spills="", stack="", smem="", markers="",
                             status=f"skipped (targets {', '.join(archs) or 'nothing registered'})"))
            continue
        for label, defines, dyn_smem, *extra in builds():
            build_markers = tuple(markers) + (tuple(extra[0]) if extra else ())
            row = dict(kernel=src, build=label, arch=arch, regs="", spills="", stack="", smem="", markers="")
            rows.append(row)
            if tc is None:
                row["status"] = "FAIL: no CUDA compiler (nvcc or NVRTC)"
                ok = False
                continue
            try:
                b = build.compile_source(src, arch, defines, tc=tc, use_cache=use_cache)
            except build.CompileError as e:
                row["status"] = "FAIL: compile error: " + str(e).strip().splitlines()[-1][:200]
                ok = False
                continue
            info = parse_ptxas(b.log)
            row.update(regs=info["regs"], spills=info["spills"], stack=info["stack"],
                       smem=info["static_smem"] + dyn_smem)
            problems = []
            if info["spills"]:
                problems.append(f"{info['spills']} B spilled")
            if info["stack"]:
                problems.append(f"{info['stack']} B stack frame")
            warn = [ln.strip() for ln in b.log.splitlines() if PERF_WARNINGS.search(ln)]
            if warn:
                problems.append("ptxas: " + warn[0][:160])
            text = sass(b.cubin)
            if text is None:
                row["markers"] = "(no cuobjdump: not checked)"
            else:
                found = {m: len(re.findall(rf"\b{re.escape(m)}\b", text)) for m in build_markers}
                row["markers"] = " ".join(f"{m}:{n}" for m, n in found.items())
                missing = [m for m, n in found.items() if n == 0]
                if missing:
                    problems.append("missing " + ", ".join(missing))
            row["status"] = "ok" if not problems else "FAIL: " + "; ".join(problems)
            ok = ok and not problems
    return rows, ok


def format_table(rows: list[dict]) -> str:
    """The build-check rows as an aligned text table (one line per kernel build)."""
    widths = {c: max(len(c), *(len(str(r.get(c, ""))) for r in rows)) if rows else len(c) for c in COLUMNS}
    lines = ["  ".join(c.ljust(widths[c]) for c in COLUMNS), "  ".join("-" * widths[c] for c in COLUMNS)]
    for r in rows:
        lines.append("  ".join(str(r.get(c, "")).ljust(widths[c]) for c in COLUMNS))
    return "\n".join(lines)


def main_build_check(args) -> int:
    """CLI body: ``args.arch`` is one arch or a list (e.g. ``["sm_90a", "sm_100a"]``), ``args.kernel`` (optional) the
    kernel sources to check (default: all); prints a table per arch and returns the exit code (0 when every build
    passed, 2 for a kernel name that is not a source)."""
    archs = getattr(args, "arch", None) or ["sm_90a"]
    if isinstance(archs, str):
        archs = [archs]
    only = tuple(getattr(args, "kernel", None) or ()) or None
    tc = build.toolchain()
    print(f"toolchain: {tc or 'none found'}; cache: {build.cache_dir()}")
    all_ok = True
    for arch in archs:
        try:
            rows, ok = build_check(arch, only=only)
        except ValueError as e:
            print(f"build-check: {e}", file=sys.stderr)
            return 2
        print(f"\n== {arch}: {'ok' if ok else 'FAILED'}")
        print(format_table(rows))
        all_ok = all_ok and ok
    return 0 if all_ok else 1


if __name__ == "__main__":  # python -m tilewright.cuda_fallback.build_check [arch ...]
    import types

    sys.exit(main_build_check(types.SimpleNamespace(arch=sys.argv[1:] or ["sm_90a"])))
