// Programmatic dependent launch: the two instructions a kernel uses.
#pragma once

namespace {

// Programmatic dependent launch (a kernel launched with cudaLaunchAttributeProgrammaticStreamSerialization): wait
// until the kernels this one depends on have finished and their writes are visible; let the kernels that depend on
// this one start. Both do nothing in a kernel launched without the attribute.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

}  // namespace
