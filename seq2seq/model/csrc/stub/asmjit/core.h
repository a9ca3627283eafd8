// What fbgemm's SimdUtils.h needs of asmjit (JIT register types, never used by int8_rows.h):
// torch ships fbgemm's headers but not asmjit's, and fbgemm_utils.h reaches SimdUtils.h.
// Declarations only; compiled_step.py puts csrc/stub on the include path.
#pragma once

#define ASMJIT_LIBRARY_MAKE_VERSION(major, minor, patch) \
  (((major) << 16) | ((minor) << 8) | (patch))
#define ASMJIT_LIBRARY_VERSION ASMJIT_LIBRARY_MAKE_VERSION(1, 0, 0)

namespace asmjit {
namespace x86 {
class Xmm;
class Ymm;
class Zmm;
}  // namespace x86
}  // namespace asmjit
