"""Build and load ``specdec_cuda_kernels.so``, the CUDA C++ skinny GEMMs (``skinny_gemm.cu``), through ctypes.

The library has a plain C ABI (raw device pointers, sizes, a ``cudaStream_t``) and links the CUDA runtime
statically, so no torch headers are needed to build it. Where it is looked for: the path in the environment
variable ``SPECDEC_CUDA_KERNELS`` if set, else ``build/specdec_cuda_kernels.so`` under the repository root.

Example::

    >>> import os
    >>> os.environ["SPECDEC_CUDA_KERNELS"] = "/nonexistent/lib.so"
    >>> try:
    ...     load_library()
    ... except KernelLibraryError as exc:
    ...     print("not found" in str(exc))
    True
    >>> del os.environ["SPECDEC_CUDA_KERNELS"]
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import threading
from pathlib import Path

__all__ = [
    "KernelLibraryError",
    "library_path",
    "build_command",
    "build_kernels",
    "load_library",
    "source_files",
    "SOURCE",
    "ENV_VAR",
]

SOURCE = Path(__file__).with_name("skinny_gemm.cu")
ENV_VAR = "SPECDEC_CUDA_KERNELS"
_REPO_ROOT = Path(__file__).resolve().parents[3]
_DEFAULT = _REPO_ROOT / "build" / "specdec_cuda_kernels.so"
# The W12 kernels that take a workspace (K split over independent CTAs, and v9 whose plan asks for none) share one C contract: ``specdec_w12_gemm_small_m_<variant>``
# (planes, output, sizes, workspace and its bytes, stream) and ``specdec_w12_<variant>_plan`` (seven int64 values).
# The Q and bf16 kernels on the tensor-map pipeline follow it with their own operands: ``specdec_q_gemm_small_m_<v>`` and
# ``specdec_q_<v>_plan``, ``specdec_skinny_gemm_bf16_<v>`` and ``specdec_bf16_<v>_plan`` for v2 (split K), v3 (persistent)
# v4 (row tiles over the whole of K, W12 v9; these need no workspace: their plans ask for 0 bytes) and v5 (row tiles
# where they pay, else Q v2 / bf16 v3; W12 v10: else v8).
W12_WORKSPACE_VARIANTS = ("v4", "v5", "v6", "v7", "v8", "v9", "v10")
TENSOR_MAP_QB_VARIANTS = ("v2", "v3", "v4", "v5")
_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}


class KernelLibraryError(RuntimeError):
    """The CUDA kernel library is missing, cannot be built here or cannot be loaded."""


_QUOTED_INCLUDE = re.compile(r'^#include "([^"]+)"', re.M)


def source_files(source: Path | str = SOURCE) -> list[Path]:
    """The library's source: ``source`` (the translation unit nvcc builds, default ``skinny_gemm.cu``) and every header
    it includes with a quoted ``#include``, each once, in the order the preprocessor first opens them (list of Path).

    The kernels, plans and launches are headers beside ``skinny_gemm.cu`` (``common/``, ``registers/``, ``ring/``,
    ``wide/``; README.md there has the map); tests that read the source read all of it through this. Raises
    :class:`KernelLibraryError` naming the including file when a quoted include does not exist.

    Example::

        >>> files = source_files()
        >>> files[0].name, files[1].relative_to(SOURCE.parent).as_posix()
        ('skinny_gemm.cu', 'common/params.cuh')
    """
    order: list[Path] = []
    seen: set[Path] = set()

    def visit(path: Path) -> None:
        seen.add(path)
        order.append(path)
        for name in _QUOTED_INCLUDE.findall(path.read_text()):
            header = (path.parent / name).resolve()
            if not header.is_file():
                raise KernelLibraryError(f"{path} includes {name!r}: no such file at {header}")
            if header not in seen:
                visit(header)

    visit(Path(source).resolve())
    return order


def library_path() -> Path:
    """Where the library is expected: ``$SPECDEC_CUDA_KERNELS`` or ``<repo>/build/specdec_cuda_kernels.so``.

    Example::

        >>> library_path().name.endswith(".so")
        True
    """
    env = os.environ.get(ENV_VAR)
    return Path(env) if env else _DEFAULT


def build_command(out: Path | str, *, nvcc: str = "nvcc", arch: str = "sm_90a", source: Path | str = SOURCE) -> list[str]:
    """The nvcc command line that builds the library at ``out`` from ``source`` (default ``skinny_gemm.cu``; list of str).

    Example::

        >>> " ".join(build_command("build/x.so")[1:6])
        '-O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 --shared -Xcompiler'

    ``-gencode`` names the one target: nvcc's ``-arch=sm_90a`` shorthand also runs a plain ``compute_90`` pass, which
    rejects the wgmma instructions of the wide kernels.
    """
    if not arch.startswith("sm_"):
        raise ValueError(f"arch: expected an sm_XX GPU name such as 'sm_90a', got {arch!r}")
    return [
        nvcc,
        "-O3",
        f"-gencode=arch=compute_{arch[3:]},code={arch}",
        "-std=c++17",
        "--shared",
        "-Xcompiler",
        "-fPIC",
        "-cudart",
        "static",
        str(source),
        "-o",
        str(out),
    ]


def build_kernels(out: Path | str | None = None, *, nvcc: str | None = None, arch: str = "sm_90a") -> Path:
    """Compile ``skinny_gemm.cu`` into ``out`` (default :func:`library_path`) with nvcc; returns the path.

    Raises :class:`KernelLibraryError` when no nvcc is found (``nvcc`` argument, ``$CUDA_HOME/bin``,
    ``PATH``) or the compiler fails (its output is in the message). Takes about half a minute.
    """
    out = Path(out) if out is not None else library_path()
    compiler = nvcc or shutil.which("nvcc") or _cuda_home_nvcc()
    if compiler is None:
        raise KernelLibraryError(
            f"cannot build {out}: no nvcc found (looked at PATH and $CUDA_HOME/bin); install the CUDA toolkit or "
            f"build elsewhere with: {' '.join(build_command(out))}"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    # nvcc writes a file of its own, renamed over `out` when complete: a process that loads `out` while another builds
    # it (parallel test workers) sees the old library or the new one, never a half-written file
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    cmd = build_command(partial, nvcc=compiler, arch=arch)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        partial.unlink(missing_ok=True)
        raise KernelLibraryError(f"nvcc failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr[-4000:]}")
    os.replace(partial, out)
    return out


def _cuda_home_nvcc() -> str | None:
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").exists():
        return str(Path(home) / "bin" / "nvcc")
    return None


def load_library(*, build_if_missing: bool = True) -> ctypes.CDLL:
    """The loaded library (cached per path), with argument types declared.

    When the file is missing and the path is the default one, it is built first if nvcc exists
    (``build_if_missing``). A path given through ``$SPECDEC_CUDA_KERNELS`` is never built: a missing
    file there raises :class:`KernelLibraryError` naming the path and how to build it, and so does a library
    built from an older source (an entry point missing).
    """
    path = library_path()
    key = str(path)
    with _lock:
        if key in _loaded:
            return _loaded[key]
        if not path.exists():
            explicit = ENV_VAR in os.environ
            can_build = build_if_missing and not explicit and (shutil.which("nvcc") or _cuda_home_nvcc())
            if not can_build:
                how = f"set {ENV_VAR} to the built file" if not explicit else f"unset {ENV_VAR} or build it there"
                raise KernelLibraryError(
                    f"CUDA kernel library not found at {path}"
                    f"{f' ({ENV_VAR})' if explicit else ''}; build it with `{' '.join(build_command(path))}` "
                    f"(or specdec.kernels.cuda.build_kernels()) on a machine with nvcc, or {how}"
                )
            build_kernels(path)
        try:
            lib = ctypes.CDLL(str(path))
        except OSError as exc:
            raise KernelLibraryError(f"cannot load the CUDA kernel library {path}: {exc}") from exc
        try:
            _declare(lib)
        except AttributeError as exc:  # a library built from an older skinny_gemm.cu lacks the newer entry points
            raise KernelLibraryError(
                f"the CUDA kernel library {path} does not match {SOURCE.name} ({exc}); rebuild it with "
                f"`{' '.join(build_command(path))}` (or specdec.kernels.cuda.build_kernels())"
            ) from exc
        _loaded[key] = lib
        return lib


def _declare(lib: ctypes.CDLL) -> None:
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.specdec_cuda_last_error.restype = ctypes.c_char_p
    lib.specdec_cuda_last_error.argtypes = []
    lib.specdec_set_programmatic_launch.restype = None
    lib.specdec_set_programmatic_launch.argtypes = [i]
    lib.specdec_set_row_stage_groups.restype = None
    lib.specdec_set_row_stage_groups.argtypes = [i]
    lib.specdec_set_wide_pipeline.restype = None
    lib.specdec_set_wide_pipeline.argtypes = [i]
    lib.specdec_set_wide_ctas_per_sm.restype = None
    lib.specdec_set_wide_ctas_per_sm.argtypes = [i]
    lib.specdec_set_wide_stage_groups.restype = None
    lib.specdec_set_wide_stage_groups.argtypes = [i]
    lib.specdec_set_wide_unroll.restype = None
    lib.specdec_set_wide_unroll.argtypes = [i]
    lib.specdec_wide_unrolled.restype = i
    lib.specdec_wide_unrolled.argtypes = [i, i, i]
    lib.specdec_set_wide_stream_k.restype = None
    lib.specdec_set_wide_stream_k.argtypes = [i]
    lib.specdec_wide_stream_k_takes.restype = i
    lib.specdec_wide_stream_k_takes.argtypes = [i, i, i, i, i, i]
    lib.specdec_wide_ablation.restype = i
    lib.specdec_wide_ablation.argtypes = []
    lib.specdec_wide_trace_fields.restype = i
    lib.specdec_wide_trace_fields.argtypes = []
    lib.specdec_wide_trace_ctas.restype = i
    lib.specdec_wide_trace_ctas.argtypes = []
    lib.specdec_wide_trace_reset.restype = i
    lib.specdec_wide_trace_reset.argtypes = [p]
    lib.specdec_wide_trace_read.restype = i
    lib.specdec_wide_trace_read.argtypes = [ctypes.POINTER(ctypes.c_ulonglong), i]
    lib.specdec_rows_stage_groups.restype = i
    lib.specdec_rows_stage_groups.argtypes = [i, i, i, i, i, i]
    lib.specdec_skinny_plan.restype = i
    lib.specdec_skinny_plan.argtypes = [i, i, i, i, i, ctypes.POINTER(ctypes.c_int)]
    lib.specdec_skinny_gemm_bf16.restype = i
    lib.specdec_skinny_gemm_bf16.argtypes = [p, p, p, i, i, i, p]
    lib.specdec_w12_gemm_small_m.restype = i
    lib.specdec_w12_gemm_small_m.argtypes = [p, p, p, p, p, p, p, p, i, i, i, p]
    lib.specdec_w12_gemm_small_m_v3.restype = i
    lib.specdec_w12_gemm_small_m_v3.argtypes = [p, p, p, p, p, p, p, p, i, i, i, p]
    lib.specdec_w12_v3_plan.restype = i
    lib.specdec_w12_v3_plan.argtypes = [i, i, i, i, i, ctypes.POINTER(ctypes.c_int)]
    for variant in W12_WORKSPACE_VARIANTS:
        run, plan = getattr(lib, f"specdec_w12_gemm_small_m_{variant}"), getattr(lib, f"specdec_w12_{variant}_plan")
        run.restype = i
        run.argtypes = [p, p, p, p, p, p, p, p, i, i, i, p, ctypes.c_longlong, p]
        plan.restype = i
        plan.argtypes = [i, i, i, i, ctypes.POINTER(ctypes.c_longlong)]
    lib.specdec_q_gemm_small_m.restype = i
    lib.specdec_q_gemm_small_m.argtypes = [p, p, p, p, i, i, i, p]
    for variant in TENSOR_MAP_QB_VARIANTS:
        for run, operands in ((f"specdec_q_gemm_small_m_{variant}", 3), (f"specdec_skinny_gemm_bf16_{variant}", 2)):
            getattr(lib, run).restype = i
            getattr(lib, run).argtypes = [p] * (operands + 1) + [i, i, i, p, ctypes.c_longlong, p]
        for plan in (f"specdec_q_{variant}_plan", f"specdec_bf16_{variant}_plan"):
            getattr(lib, plan).restype = i
            getattr(lib, plan).argtypes = [i, i, i, i, ctypes.POINTER(ctypes.c_longlong)]
    ll = ctypes.c_longlong
    lib.specdec_stream_k_segments.restype = ll
    lib.specdec_stream_k_segments.argtypes = [ll, ll, ll, ctypes.POINTER(ll), ll]
    lib.specdec_w12_gemm_wide.restype = i
    lib.specdec_w12_gemm_wide.argtypes = [p, p, p, p, p, p, p, p, i, i, i, p, ll, p]
    lib.specdec_q_gemm_wide.restype = i
    lib.specdec_q_gemm_wide.argtypes = [p, p, p, p, i, i, i, p, ll, p]
    lib.specdec_wide_plan.restype = i
    lib.specdec_wide_plan.argtypes = [i, i, i, i, i, ctypes.POINTER(ll)]
    lib.specdec_wide_split_layout.restype = i
    lib.specdec_wide_split_layout.argtypes = [i, i, i, i, i, ll, ctypes.POINTER(ll)]
