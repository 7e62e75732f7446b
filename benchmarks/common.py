"""What every benchmark shares: the copy-bandwidth floor, timers, CUDA-graph capture and provenance.

Benchmarks run as modules from the repository root, e.g. ``python -m benchmarks.decode.bench_ar``.
Every result file goes through :func:`write_json`, which records :func:`provenance` beside the
numbers, and every printed report starts with :func:`provenance_line`.

Example (CPU):
    >>> from benchmarks.common import median_time_ms, provenance
    >>> ms = median_time_ms(lambda: sum(range(1000)), 5, device="cpu")
    >>> ms > 0
    True
    >>> sorted(provenance(seed=0))[:3]
    ['command', 'cuda', 'date_utc']
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from specdec.pilot.profile import copy_bandwidth as pilot_copy_bandwidth

REPO_ROOT = Path(__file__).resolve().parents[1]
PROVENANCE_FIELDS = (
    "specdec",
    "git_commit",
    "git_dirty",
    "source_sha256",
    "gpu",
    "driver",
    "torch",
    "triton",
    "transformers",
    "cuda",
    "seed",
    "command",
    "date_utc",
    "env",
)


TINY_QWEN3 = dict(
    vocab_size=512,
    hidden_size=64,
    intermediate_size=128,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    head_dim=16,
    qk_norm=True,
    model_type="qwen3",
)
"""The Qwen3-style config fields of the CPU smoke runs' tiny stand-in target (``TargetConfig(**TINY_QWEN3)``)."""


def _device(device: torch.device | str | None) -> torch.device:
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def median_time_ms(fn: Callable[[], Any], reps: int, *, device: torch.device | str | None = None, warmup: int = 3) -> float:
    """Median milliseconds of one ``fn()`` call over ``reps`` calls, after ``warmup`` untimed calls.

    On a CUDA device each call sits between two CUDA events and is synchronised on (launch gaps
    included); elsewhere host wall-clock time. ``device=None`` means CUDA when available.

    Example:
        >>> median_time_ms(lambda: None, 3, device="cpu") >= 0
        True
    """
    if reps < 1:
        raise ValueError(f"reps: expected >= 1, got {reps}")
    for _ in range(warmup):
        fn()
    times = []
    if _device(device).type == "cuda":
        torch.cuda.synchronize()
        for _ in range(reps):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end))
    else:
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def mean_time_ms(fn: Callable[[], Any], reps: int, *, warmup: int = 1) -> float:
    """Milliseconds per call of ``reps`` back-to-back ``fn()`` calls between one pair of CUDA events.

    No synchronisation between calls: the GPU's throughput, host launch time hidden where it can be.
    CUDA only.
    """
    if reps < 1:
        raise ValueError(f"reps: expected >= 1, got {reps}")
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def capture_cuda_graph(fn: Callable[[], Any], *, warmup: int = 2) -> Callable[[], None]:
    """Run ``fn`` ``warmup`` times on a side stream, capture one call in a CUDA graph, return its replay.

    The warm-up settles the allocator and kernel selection before capture; the returned function
    keeps the graph alive.
    """
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(warmup):
            fn()
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def warm_graphs(
    target,
    prompt: torch.Tensor,
    rows: Sequence[int],
    views: Sequence[str] = ("exact",),
    hidden_layers: Sequence[Sequence[int]] = ((),),
) -> list[int]:
    """Run, once each and discarded, the prefill of ``prompt [1, P]`` and a chain pass of every row count in ``rows``
    (those a chain plan of the prompt can hold, at most ``P + 1``, and the cache past it) with every weight view in
    ``views`` and every set of returned hidden layers in ``hidden_layers`` (a drafter's feature layers), then reset the
    target. A target with ``enable_cuda_graphs`` captures a graph at the first use of each (row bucket, hidden layers,
    view), ~0.1-0.2 s on an 8B stack: run before a timed region, this keeps every capture of those keys out of it.
    Returns the row counts run.

    Example:
        >>> from specdec.testing import tiny_target
        >>> warm_graphs(tiny_target(seed=0), torch.tensor([[3, 5, 7]]), (1, 2, 4, 8))
        [1, 2, 4]
    """
    from specdec.contracts import Tree, VerifyPlan

    length = prompt.shape[1]
    run = [r for r in rows if 1 <= r <= length + 1 and length + r <= target.max_seq_len]
    for layers in hidden_layers:
        for view in views:
            for r in run:
                target.reset()
                target(prompt, hidden_layers=tuple(layers))
                target.commit(prompt.shape[1])
                plan = VerifyPlan.for_tree(prompt[0, -1:], Tree.chain(prompt[0, : r - 1]), prefix_len=target.length)
                target.run_plan(plan, hidden_layers=tuple(layers), view=view)
                target.discard()
    target.reset()
    return run


def agg_pyplot():
    """``matplotlib.pyplot`` on the file-only Agg backend (no display on the machines); ImportError without matplotlib.

    Example:
        >>> agg_pyplot().get_backend().lower()
        'agg'
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def report(
    out: str | os.PathLike,
    result: dict,
    prov: dict,
    plot: Callable[[dict, Path], str | None],
    lines: Callable[[dict], list[str]],
) -> Path:
    """A benchmark's last step: ``result`` as JSON at ``out`` (with provenance), its PNG beside it, then the provenance
    line and the summary ``lines(result)`` printed; the JSON's path."""
    path = write_json(out, result, prov, indent=1)
    note = plot(result, path.with_suffix(".png"))
    print(f"wrote {path}" + (f"; {note}" if note else f" and {path.with_suffix('.png')}"))
    print(provenance_line(prov))
    for line in lines(result):
        print(line)
    return path


def redraw(plot: Callable[[dict, Path], str | None], json_path: str | os.PathLike) -> int:
    """A benchmark's ``--plot-only``: ``plot`` the JSON at ``json_path`` into the PNG beside it; 0, or 1 with the reason
    printed when there is no plot."""
    src = Path(json_path)
    note = plot(json.loads(src.read_text()), src.with_suffix(".png"))
    print(note or f"wrote {src.with_suffix('.png')}")
    return 0 if note is None else 1


def parse_alternate(spec: str) -> tuple[str, list[str]]:
    """An ``--alternate`` argument's environment variable and values; ValueError naming the argument unless it is an
    environment variable's name, ``=``, and two or more distinct comma-separated values.

    Example:
        >>> parse_alternate("SPECDEC_WIDE_STREAM_K=0,auto")
        ('SPECDEC_WIDE_STREAM_K', ['0', 'auto'])
    """
    name, _, values = spec.partition("=")
    settings = values.split(",") if values else []
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name) or len(settings) < 2 or len(set(settings)) != len(settings) or "" in settings:
        raise ValueError(f"--alternate: expected NAME=VALUE,VALUE[,...] (two or more distinct values), got {spec!r}")
    return name, settings


def add_alternate_arguments(ap: argparse.ArgumentParser, what: str) -> None:
    """``--alternate NAME=V1,V2`` (``what`` timed again under each value of that environment variable in turn, in this
    one process) and ``--alternate-rounds`` (turns through the values, default 3) on ``ap``; read back with
    :func:`alternate_of`."""
    ap.add_argument(
        "--alternate",
        default=None,
        metavar="NAME=V1,V2",
        help=f"{what} again under each value of this environment variable in turn, in this one process",
    )
    ap.add_argument("--alternate-rounds", type=int, default=3, help="turns through the --alternate values")


def alternate_of(ap: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, list[str]] | None:
    """``args``' ``--alternate`` as ``(name, values)`` (None when not given); ``ap.error`` naming the argument for a
    malformed one (:func:`parse_alternate`) or an ``--alternate-rounds`` under 1."""
    if args.alternate_rounds < 1:
        ap.error(f"--alternate-rounds: expected a positive count, got {args.alternate_rounds}")
    if args.alternate is None:
        return None
    try:
        return parse_alternate(args.alternate)
    except ValueError as err:
        ap.error(str(err))


@contextlib.contextmanager
def env_set(name: str, value: str):
    """The environment variable ``name`` set to ``value`` inside the block, put back as it was (or removed) after.

    Example:
        >>> with env_set("SPECDEC_EXAMPLE_SETTING", "1"):
        ...     os.environ["SPECDEC_EXAMPLE_SETTING"]
        '1'
        >>> "SPECDEC_EXAMPLE_SETTING" in os.environ
        False
    """
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def copy_bandwidth(device: torch.device | str | None = None, *, nbytes: int = 1 << 30, reps: int = 20) -> float:
    """Bytes per second of a device-to-device copy of ``nbytes``, read and written bytes both counted.

    The median of ``reps`` CUDA-event timings; the floor every benchmark divides bytes by. ``nan`` on
    a device that is not CUDA (CPU smoke runs have no floor).
    """
    device = _device(device)
    if device.type != "cuda":
        return float("nan")
    bandwidth = pilot_copy_bandwidth(device, nbytes=nbytes, reps=reps)  # the library's probe, same method
    torch.cuda.empty_cache()
    return bandwidth


def _git(*args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _driver_version() -> str | None:
    if not torch.cuda.is_available():
        return None
    try:
        done = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], capture_output=True, text=True, timeout=20
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = done.stdout.split()
    return lines[0] if done.returncode == 0 and lines else None


SOURCE_DIRS = ("specdec", "benchmarks")
SOURCE_SUFFIXES = (".py", ".cu", ".sh")


def source_digest(root: str | os.PathLike = REPO_ROOT) -> str:
    """SHA-256 of the source files under ``root``'s ``specdec/`` and ``benchmarks/`` as they are on disk: every
    ``.py``, ``.cu`` and ``.sh`` file (``benchmarks/results`` and ``__pycache__`` left out), its path relative to
    ``root`` and its bytes, in path order. It names the code a result came from where ``git_commit`` cannot: a copy
    of the tree whose git metadata is older than its files. To match a result to a commit, compute it on a
    checkout of that commit (``git worktree add /tmp/c <commit>``, then ``source_digest("/tmp/c")``).

    Computed once a process for each root (the files do not change under a running benchmark).

    Example:
        >>> len(source_digest()), source_digest() == source_digest(REPO_ROOT)
        (64, True)
    """
    return _source_digest(str(Path(root).resolve()))


@functools.lru_cache(maxsize=4)
def _source_digest(root: str) -> str:
    base = Path(root)
    digest = hashlib.sha256()
    files = sorted(
        rel
        for top in SOURCE_DIRS
        for path in (base / top).rglob("*")
        if path.suffix in SOURCE_SUFFIXES and "__pycache__" not in path.parts and path.is_file()
        if not (rel := path.relative_to(base).as_posix()).startswith("benchmarks/results/")
    )
    for rel in files:
        digest.update(rel.encode() + b"\0" + (base / rel).read_bytes() + b"\0")
    return digest.hexdigest()


def provenance(seed: int | None) -> dict:
    """Where a result comes from: code, machine, library versions, seed, command line and UTC date.

    Keys (``PROVENANCE_FIELDS``): ``specdec`` version, ``git_commit`` and ``git_dirty`` (tracked files
    changed; ``None`` outside a git checkout, or when ``$SPECDEC_GIT_COMMIT`` names the commit of a copied
    tree), ``source_sha256`` (:func:`source_digest`: the source files as they were on disk), ``gpu`` name and NVIDIA ``driver`` version (``None``
    without CUDA), ``torch``, ``triton``, ``transformers`` and ``cuda`` versions, ``seed`` (``None``
    when the benchmark draws no random numbers), ``command`` (as typed, ``python -m ...``) and
    ``date_utc`` (ISO 8601), ``env``: the ``SPECDEC_*`` environment variables set (kernel variants, programmatic
    launch; ``$SPECDEC_GIT_COMMIT`` is in ``git_commit``), which change what a command runs.

    Example:
        >>> p = provenance(seed=0)
        >>> p["seed"], p["date_utc"].endswith("+00:00")
        (0, True)
    """
    import specdec

    if seed is not None and not isinstance(seed, int):
        raise TypeError(f"seed: expected an int or None, got {type(seed).__name__}")
    # A copy of the working tree whose .git is older than its files (a remote machine's) names the commit
    # its files were taken from in SPECDEC_GIT_COMMIT; whether they were changed since is then unknown.
    commit = os.environ.get("SPECDEC_GIT_COMMIT") or _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit and "SPECDEC_GIT_COMMIT" not in os.environ else None
    cuda = torch.cuda.is_available()
    return {
        "specdec": specdec.__version__,
        "git_commit": commit,
        "git_dirty": None if status is None else bool(status),
        "source_sha256": source_digest(),
        "gpu": torch.cuda.get_device_name() if cuda else None,
        "driver": _driver_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "cuda": torch.version.cuda,
        "seed": seed,
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "date_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("SPECDEC_") and k != "SPECDEC_GIT_COMMIT"},
    }


def provenance_line(prov: dict) -> str:
    """One printable line of :func:`provenance` (starts with ``#``), for the top of every report.

    Example:
        >>> provenance_line(provenance(seed=3)).startswith("# specdec ")
        True
    """
    commit = (prov["git_commit"] or "unknown")[:12] + (" (dirty)" if prov["git_dirty"] else "")
    gpu = f"{prov['gpu']} driver {prov['driver']} CUDA {prov['cuda']}" if prov["gpu"] else "no GPU"
    env = "".join(f" {k}={v}" for k, v in (prov.get("env") or {}).items())
    return (
        f"# specdec {prov['specdec']} @ {commit} | {gpu} | torch {prov['torch']} triton {prov['triton']} "
        f"transformers {prov['transformers']} | seed {prov['seed']} | {prov['date_utc']} | {prov['command']}"
        + (f" |{env}" if env else "")
    )


def write_json(path: str | os.PathLike, result: dict, prov: dict, *, indent: int = 2) -> Path:
    """Write ``{"provenance": prov, **result}`` to ``path`` (parent folders made); returns the path.

    Values JSON cannot hold (dtypes, devices, paths) are written as their ``str``.

    Example:
        >>> import tempfile, json
        >>> p = write_json(tempfile.mkdtemp() + "/r.json", {"x": 1}, provenance(seed=None))
        >>> json.loads(p.read_text())["x"]
        1
    """
    if not isinstance(result, dict):
        raise TypeError(f"result: expected a dict, got {type(result).__name__}")
    missing = [k for k in PROVENANCE_FIELDS if k not in prov]
    if missing:
        raise ValueError(f"prov: expected every field of PROVENANCE_FIELDS, missing {missing}")
    if "provenance" in result:
        raise ValueError("result: expected no 'provenance' key (write_json adds it), got one")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"provenance": prov, **result}, indent=indent, default=str))
    return path


class Cycle:
    """A call that runs ``fn(i)`` for ``i = 0, 1, ..., copies - 1, 0, ...``: each captured call gets the next copy
    (``bench_roofline.time_per_call`` captures whole cycles of it, so that every call reads a copy ``copies`` calls
    after its last read, across replays too).

    Example:
        >>> seen = []
        >>> c = Cycle(seen.append, 3)
        >>> for _ in range(4):
        ...     c()
        >>> seen
        [0, 1, 2, 0]
    """

    def __init__(self, fn: Callable[[int], object], copies: int):
        self.fn, self.copies, self.i = fn, copies, 0

    def __call__(self) -> object:
        out = self.fn(self.i)
        self.i = (self.i + 1) % self.copies
        return out
