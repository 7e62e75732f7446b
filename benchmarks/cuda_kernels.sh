# Sourced by the runners that time the CUDA kernels: build_cuda_kernels CAP_S LOG builds the library from
# specdec/kernels/cuda/skinny_gemm.cu for sm_90a with nvcc (at most CAP_S seconds, registers and spills to LOG)
# unless $SPECDEC_CUDA_KERNELS or build/specdec_cuda_kernels.so is already there (carried from the CPU machine).
build_cuda_kernels() {
  local cap=$1 log=$2
  local so=${SPECDEC_CUDA_KERNELS:-build/specdec_cuda_kernels.so}
  if [ ! -f "$so" ]; then
    echo "building $so"
    mkdir -p "$(dirname "$so")"
    timeout "$cap" nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 --shared -Xcompiler -fPIC -cudart static -Xptxas -v \
      specdec/kernels/cuda/skinny_gemm.cu -o "$so" 2>&1 | grep -E "registers|spill" | tee "$log"
  fi
}
# build_cuda_library_with FLAGS SO CAP LOG builds the library at SO with the extra nvcc FLAGS (skinny_gemm.cu's
# build-time -D switches) unless SO is already there, in at most CAP seconds, the compiler's output to LOG.
build_cuda_library_with() {
  local flags=$1 so=$2 cap=$3 log=$4
  if [ ! -f "$so" ]; then
    mkdir -p "$(dirname "$so")"
    # shellcheck disable=SC2086
    timeout "$cap" nvcc -O3 -gencode=arch=compute_90a,code=sm_90a -std=c++17 --shared -Xcompiler -fPIC -cudart static $flags \
      specdec/kernels/cuda/skinny_gemm.cu -o "$so" > "$log" 2>&1
    echo "nvcc $flags: exit $?"
  fi
}
# build_traced_libraries FLAGS LOG builds build/wide_trace.so (-DSPECDEC_WIDE_TRACE=1) and, where FLAGS (nvcc -D
# switches of skinny_gemm.cu) are given, build/wide_trace_flagged.so with them as well, each unless already there, in at
# most 90 s, the compiler's output to LOG.log and LOG_flagged.log; FLAGS that are not -D switches: a message, exit 2.
build_traced_libraries() {
  local flags=$1 log=$2
  case $flags in
    "" | -D*) ;;
    *) echo "FLAGS: expected nvcc -D switches of skinny_gemm.cu, got $flags" >&2; exit 2 ;;
  esac
  build_cuda_library_with "-DSPECDEC_WIDE_TRACE=1" build/wide_trace.so 90 "$log.log"
  if [ -n "$flags" ]; then
    build_cuda_library_with "-DSPECDEC_WIDE_TRACE=1 $flags" build/wide_trace_flagged.so 90 "${log}_flagged.log"
  fi
}
# A call carries 64 MiB with the tracked tree (~54 MiB): two libraries of ~2 MB as they are, but xz shrinks
# `-Xfatbin -compress-all` libraries ~2x more (2.1 -> 1.0 MB). pack_cuda_libraries ARCHIVE SO... (on the CPU machine)
# writes the libraries into one .tar.xz by their file names; sourcing this file on the GPU machine unpacks
# build/libraries.tar.xz, when carried, into build/. A library a warm machine kept from an earlier call under the same
# name is replaced where it differs from the archive's: the carried archive is the tree being run.
pack_cuda_libraries() {
  python3 -c '
import sys, tarfile
from pathlib import Path
archive, libraries = sys.argv[1], [Path(p) for p in sys.argv[2:]]
missing = [str(p) for p in libraries if not p.is_file()]
if not libraries or missing:
    sys.exit(f"libraries: expected built .so files, got none" if not libraries else f"libraries: not found: {missing}")
with tarfile.open(archive, "w:xz", preset=9) as tar:
    for p in libraries:
        tar.add(p, arcname=p.name)
print(f"{archive}: {len(libraries)} libraries, {Path(archive).stat().st_size / 2**20:.1f} MiB")
' "$@"
}
unpack_cuda_libraries() {
  python3 -c '
import sys, tarfile
from pathlib import Path
archive, dest = Path(sys.argv[1]), Path(sys.argv[2])
with tarfile.open(archive, "r:xz") as tar:
    for member in tar.getmembers():
        if not member.isfile() or Path(member.name).name != member.name:
            sys.exit(f"{archive}: expected library files at its top level, got {member.name!r}")
        there = dest / member.name
        if there.exists() and there.read_bytes() == tar.extractfile(member).read():
            print(f"{there}: already there, the same")
            continue
        how = "replaced (it differed)" if there.exists() else "unpacked"
        there.unlink(missing_ok=True)
        tar.extract(member, dest, **({"filter": "data"} if hasattr(tarfile, "data_filter") else {}))
        print(f"{there}: {how} from {archive}")
' "$1" "$2"
}
if [ -f build/libraries.tar.xz ]; then unpack_cuda_libraries build/libraries.tar.xz build; fi
