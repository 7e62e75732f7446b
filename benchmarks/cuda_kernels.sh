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
