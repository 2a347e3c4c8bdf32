// The measured peak arithmetic rate of each kernel family this CPU has, on a given number of
// threads (ember bench --probe): the roofline's compute ceilings, next to the read-bandwidth probe.
// Each family runs a loop of independent multiply-accumulates on registers (no memory traffic), on
// every thread at once, for 5-20 ms; the best of three passes counts.
#pragma once

#include <string>
#include <vector>

#include "ember/backend/backend.h"
#include "ember/core/thread_pool.h"

namespace ember::cpu {

// Families, when the CPU (and, for AMX, the OS) allows them: amx-bf16 (TDPBF16PS), amx-int8
// (TDPBSSD), avx512-bf16 (VDPBF16PS), avx512-vnni (VPDPBUSD), avx512-fma
// (VFMADD f32 on 512 bits), avx2-fma (VFMADD f32).
std::vector<ComputePeak> measure_compute_peaks(ThreadPool& threads);

}  // namespace ember::cpu
