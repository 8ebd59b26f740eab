// Pinning CPU workers to their own cores, so several CPU workers on one host never
// oversubscribe it: worker i of n gets the i-th of n contiguous, near-equal groups of the CPUs
// the process may run on (its affinity mask when started). With fewer CPUs than workers,
// workers share: worker i gets CPU i mod count.
//
// Thread safety: CpuShare is pure; PinToCpus changes the calling thread's affinity (call it
// before creating threads, which inherit it).
#pragma once

#include <vector>

#include "common/result.h"

namespace ferry {

// The CPUs the calling thread may run on, ascending.
std::vector<int> AllowedCpus();

// Worker `index`'s share of `cpus` among `workers`. REQUIRES: 0 <= index < workers; cpus
// non-empty.
std::vector<int> CpuShare(const std::vector<int>& cpus, int index, int workers);

// Restricts the calling thread (and threads it creates later) to `cpus`. INVALID_ARGUMENT
// naming the CPUs when the kernel refuses.
Status PinToCpus(const std::vector<int>& cpus);

}  // namespace ferry
