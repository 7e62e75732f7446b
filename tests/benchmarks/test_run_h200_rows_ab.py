"""benchmarks/run_h200_rows_ab.sh: which library each timing and AR step runs, by ROUNDS and STEP_ROUNDS.

The runner is copied into a scratch tree whose `benchmarks/cuda_kernels.sh` builds nothing and whose `python3` and
`compute-sanitizer` only record their arguments and the library they were given.
"""

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "benchmarks" / "run_h200_rows_ab.sh"
# The two printed lines are what the runner's summary greps for in each timing's and each step's log.
RECORDER = (
    "#!/usr/bin/env bash\n"
    'echo "$SPECDEC_CUDA_KERNELS $*" >> "$CALLS"\n'
    'echo "qwen3-8b o 1 cuda_recorded"\n'
    'echo "AR step w12: recorded"\n'
)


def run_runner(tmp_path: Path, *flags: str, **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(RUNNER, tmp_path / "benchmarks" / RUNNER.name)
    (tmp_path / "benchmarks" / "cuda_kernels.sh").write_text("build_cuda_kernels() { :; }\nbuild_cuda_library_with() { :; }\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("python3", "compute-sanitizer"):
        (bin_dir / tool).write_text(RECORDER)
        (bin_dir / tool).chmod(0o755)
    (tmp_path / "out").mkdir()
    calls = tmp_path / "calls.txt"
    full_env = {
        **os.environ,
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "OUT": str(tmp_path / "out"),
        "CALLS": str(calls),
        **env,
    }
    done = subprocess.run(
        ["bash", f"benchmarks/{RUNNER.name}", *flags],
        cwd=tmp_path,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done, calls.read_text().splitlines() if calls.exists() else []


def steps(calls: list[str]) -> list[tuple[str, str]]:
    """(library, --out file name) of each AR step, in order."""
    found = []
    for call in calls:
        words = call.split()
        if "--ar-step" in words:
            found.append((words[0], Path(words[words.index("--out") + 1]).name))
    return found


def timings(calls: list[str]) -> list[str]:
    return [call.split()[0] for call in calls if "benchmarks.kernels.bench_fixed_cost" in call]


def test_the_short_form_alternates_the_steps_and_times_no_linears(tmp_path):
    done, calls = run_runner(tmp_path, "-DSPECDEC_ROWS_STAGES16=3", ROUNDS="0", STEP_ROUNDS="2")
    assert done.returncode == 0, done.stderr
    switched = "build/rows_ab_rows_stages16_3.so"
    assert timings(calls) == []
    assert steps(calls) == [
        ("build/specdec_cuda_kernels.so", "rows_ab_ar_step_shipped_1.json"),
        (switched, "rows_ab_ar_step_rows_stages16_3_1.json"),
        ("build/specdec_cuda_kernels.so", "rows_ab_ar_step_shipped_2.json"),
        (switched, "rows_ab_ar_step_rows_stages16_3_2.json"),
    ]
    assert sum("--probe" in call for call in calls) == 3  # the switched library is still checked first


def test_the_default_times_two_rounds_and_one_step_a_library(tmp_path):
    done, calls = run_runner(tmp_path, "-DSPECDEC_ROWS_STAGES16=3", "-DSPECDEC_WIDE_ABLATE=64")
    assert done.returncode == 0, done.stderr
    switched, ablated = "build/rows_ab_rows_stages16_3.so", "build/rows_ab_wide_ablate_64.so"
    shipped = "build/specdec_cuda_kernels.so"
    assert timings(calls) == [shipped, switched, ablated, shipped, switched, ablated]
    assert steps(calls) == [
        (shipped, "rows_ab_ar_step_shipped.json"),
        (switched, "rows_ab_ar_step_rows_stages16_3.json"),
    ]


def test_rounds_out_of_range_are_refused_before_any_work(tmp_path):
    done, calls = run_runner(tmp_path, "-DSPECDEC_ROWS_STAGES16=3", ROUNDS="5")
    assert done.returncode == 2 and "ROUNDS: expected 0 to 3 rounds of timings, got 5" in done.stderr
    assert calls == []


def test_step_rounds_out_of_range_are_refused_before_any_work(tmp_path):
    done, calls = run_runner(tmp_path, "-DSPECDEC_ROWS_STAGES16=3", STEP_ROUNDS="0")
    assert done.returncode == 2 and "STEP_ROUNDS: expected 1 to 3 rounds of AR steps, got 0" in done.stderr
    assert calls == []
