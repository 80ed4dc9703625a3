// fa4gen/grid_dependency.cuh: programmatic dependent launch (sm_90 and later). A kernel launched
// with the programmatic stream serialization attribute may start while the kernel before it in
// the stream is still running, once every CTA of that one has called grid_dependency_launch (or
// exited); it must call grid_dependency_wait before it reads what that kernel writes: the wait
// returns when the previous grid has completed and its memory is visible. Both are no-ops in a
// kernel launched without the attribute, so the same cubin serves either launch.
#pragma once
#include "fa4gen/prelude.cuh"

namespace fa4 {

FA4_DEVICE void grid_dependency_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

FA4_DEVICE void grid_dependency_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }

}  // namespace fa4
