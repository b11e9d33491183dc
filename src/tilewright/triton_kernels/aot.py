"""Ahead-of-time compilation of Triton kernels for a GPU target on any machine (no GPU, no driver needed).

Used by the CPU test tier and ``tilewright build-check`` to prove that a kernel compiles for sm_90 (or sm_100/sm_120),
uses the intended instructions (HGMMA / UTCHMMA / HMMA, UTMALDG for TMA) and spills nothing. Tools come from the
triton wheel (``triton/backends/nvidia/bin``: ptxas, cuobjdump), so nothing beyond ``pip install triton`` is needed.
"""
from __future__ import annotations

import importlib
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def _tool(name: str) -> str:
    return os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", name)


@dataclass
class CompiledReport:
    """What build checks look at: SASS text, register count, spill bytes, static shared memory."""

    name: str
    arch: int
    sass: str
    registers: int
    spill_bytes: int
    shared_bytes: int

    def has(self, marker: str) -> bool:
        return marker in self.sass


def _compile_one(fn, signature: dict, constexprs: dict, arch: int, num_warps: int, num_stages: int,
                 name: str, divisible_by_16=()) -> CompiledReport:
    # constexpr parameters with a default (e.g. the GEMM's SPLIT_K) take it when the job does not set them, as a
    # launch that does not pass them would
    constexprs = {**{p.name: p.default for p in fn.params if p.is_constexpr and p.has_default
                     and p.name not in signature}, **constexprs}
    sig = dict(signature)
    for k in constexprs:
        sig[k] = "constexpr"
    # What Triton's launcher specializes at run time: 16-byte aligned pointers and ints divisible by 16 (this is what
    # lets loads vectorize); ints equal to 1 are passed as constexprs by the caller.
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k in divisible_by_16}
    src = ASTSource(fn=fn, signature=sig, constexprs=constexprs, attrs=attrs)
    kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32),
                            options={"num_warps": num_warps, "num_stages": num_stages})
    suffix = "a" if arch in (90, 100, 120) else ""
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "k.cubin")
        with open(cubin, "wb") as f:
            f.write(kernel.asm["cubin"])
        sass = subprocess.run([_tool("cuobjdump"), "-sass", cubin], capture_output=True, text=True, check=True).stdout
        ptx = os.path.join(tmp, "k.ptx")
        with open(ptx, "w") as f:
            f.write(kernel.asm["ptx"])
        ptxas = _tool("ptxas-blackwell") if arch >= 100 and os.path.exists(_tool("ptxas-blackwell")) else _tool("ptxas")
        info = subprocess.run([ptxas, f"-arch=sm_{arch}{suffix}", "-v", ptx, "-o", os.path.join(tmp, "v.cubin")],
                              capture_output=True, text=True, check=True).stderr
    regs = re.search(r"Used (\d+) registers", info)
    spills = [int(x) for x in re.findall(r"(\d+) bytes spill (?:stores|loads)", info)]
    return CompiledReport(name=name, arch=arch, sass=sass, registers=int(regs.group(1)) if regs else -1,
                          spill_bytes=sum(spills), shared_bytes=int(kernel.metadata.shared))


def compile_reports(jobs: list[dict]) -> list[CompiledReport]:
    """Compile several kernels for GPU targets and return their reports.

    Each job: ``{"kernel": "package.module:function", "signature": {arg: "*bf16" | "i32" | ...},
    "constexprs": {...}, "arch": 90, "num_warps": 8, "num_stages": 3, "name": "...", "divisible_by_16": [args]}``.
    Constexpr arguments are typed "constexpr" automatically. To check the code a real launch gets, mirror Triton's
    run-time specialization: unit strides as constexprs equal to 1, aligned pointers and 16-multiple ints listed in
    ``divisible_by_16``. The compile runs in a child process with ``TRITON_INTERPRET=0``: under the
    interpreter ``@triton.jit`` yields interpreter objects that cannot be compiled.
    """
    env = dict(os.environ, TRITON_INTERPRET="0")
    proc = subprocess.run([sys.executable, "-m", "tilewright.triton_kernels.aot"], input=json.dumps(jobs),
                          capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"AOT compile failed:\n{proc.stderr[-4000:]}")
    return [CompiledReport(**r) for r in json.loads(proc.stdout.strip().splitlines()[-1])]


def _main() -> None:
    jobs = json.load(sys.stdin)
    out = []
    for job in jobs:
        module, fn_name = job["kernel"].split(":")
        fn = getattr(importlib.import_module(module), fn_name)
        rep = _compile_one(fn, job["signature"], job["constexprs"], job.get("arch", 90), job.get("num_warps", 4),
                           job.get("num_stages", 3), job.get("name", fn_name), job.get("divisible_by_16", ()))
        out.append(asdict(rep))
    print(json.dumps(out))


if __name__ == "__main__":
    _main()
