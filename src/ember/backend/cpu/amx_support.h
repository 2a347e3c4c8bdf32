// Whether this process may use Intel AMX (Advanced Matrix Extensions) tiles, and the one tile
// configuration the AMX kernels use.
//
// AMX needs three things: the CPU (CPUID.7.0:EDX AMX-TILE, AMX-BF16, AMX-INT8), the OS saving the
// tile state (XCR0 bits 17 and 18, XTILECFG and XTILEDATA) and, on Linux, the process's permission
// to use the 8 KiB of tile data (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), granted once
// for the whole process). amx_available() checks all three once; amx_unavailable_reason() names the
// first that is missing ("" when AMX is usable), for the startup log line and the tests' skips.
#pragma once

#include <cstdint>
#include <string>

namespace ember::cpu {

bool amx_available();
const std::string& amx_unavailable_reason();
// Whether the CPU has AMX-TILE (CPUID only: says nothing of the OS or the permission).
bool cpu_has_amx_tiles();

// A tile configuration (the 64-byte operand of LDTILECFG, palette 1): tile i has rows[i] rows of
// colsb[i] bytes.
struct alignas(64) AmxTileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace ember::cpu
