"""benchmarks/cuda_kernels.sh: several libraries carried to the GPU machine in one xz archive."""

import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "cuda_kernels.sh"


def bash(command: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", command], cwd=cwd, capture_output=True, text=True, timeout=60)


def test_packed_libraries_are_unpacked_into_build_when_a_runner_sources_the_script(tmp_path):
    (tmp_path / "a.so").write_bytes(b"library a" * 1000)
    (tmp_path / "b.so").write_bytes(b"library b" * 1000)
    (tmp_path / "c.so").write_bytes(b"library c" * 1000)
    packed = bash(f"source {SCRIPT} && pack_cuda_libraries libraries.tar.xz a.so b.so c.so", tmp_path)
    assert packed.returncode == 0, packed.stderr
    assert "3 libraries" in packed.stdout
    gpu = tmp_path / "gpu"
    (gpu / "build").mkdir(parents=True)
    (tmp_path / "libraries.tar.xz").rename(gpu / "build" / "libraries.tar.xz")
    (gpu / "build" / "b.so").write_bytes(b"an earlier call's b")  # stale: the archive's replaces it
    (gpu / "build" / "c.so").write_bytes(b"library c" * 1000)  # the same: left as it is
    sourced = bash(f"source {SCRIPT}", gpu)
    assert sourced.returncode == 0, sourced.stderr
    assert (gpu / "build" / "a.so").read_bytes() == b"library a" * 1000
    assert (gpu / "build" / "b.so").read_bytes() == b"library b" * 1000
    assert (gpu / "build" / "c.so").read_bytes() == b"library c" * 1000
    assert "build/a.so: unpacked" in sourced.stdout
    assert "build/b.so: replaced (it differed)" in sourced.stdout
    assert "build/c.so: already there, the same" in sourced.stdout


def test_packing_names_a_missing_library(tmp_path):
    (tmp_path / "a.so").write_bytes(b"a")
    packed = bash(f"source {SCRIPT} && pack_cuda_libraries libraries.tar.xz a.so absent.so", tmp_path)
    assert packed.returncode != 0 and "not found: ['absent.so']" in packed.stderr
    assert not (tmp_path / "libraries.tar.xz").exists()


def test_an_archive_member_outside_its_top_level_is_refused(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "evil.so").write_bytes(b"x")
    with tarfile.open(tmp_path / "libraries.tar.xz", "w:xz") as tar:
        tar.add(tmp_path / "src" / "evil.so", arcname="../evil.so")
    (tmp_path / "build").mkdir()
    unpacked = bash(f"source {SCRIPT} && unpack_cuda_libraries libraries.tar.xz build", tmp_path)
    assert unpacked.returncode != 0 and "expected library files at its top level, got '../evil.so'" in unpacked.stderr
    assert not (tmp_path / "evil.so").exists() and list((tmp_path / "build").iterdir()) == []
