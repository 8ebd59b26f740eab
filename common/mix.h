// A 64-bit mixing function: splitmix64's finalizer, a bijection whose every output bit depends
// on every input bit. For hashing keys clients choose (sequence ids) and rendezvous scores.
//
// Thread safety: pure.
#pragma once

#include <cstdint>

namespace ferry {

inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace ferry
