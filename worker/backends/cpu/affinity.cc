#include "worker/backends/cpu/affinity.h"

#include <sched.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace ferry {

std::vector<int> AllowedCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    return cpus;
  }
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) {
      cpus.push_back(cpu);
    }
  }
  return cpus;
}

std::vector<int> CpuShare(const std::vector<int>& cpus, int index, int workers) {
  int count = static_cast<int>(cpus.size());
  if (count < workers) {
    return {cpus[static_cast<size_t>(index % count)]};
  }
  // Group i holds CPUs [i * count / workers, (i + 1) * count / workers): sizes differ by <= 1.
  int64_t begin = int64_t{index} * count / workers;
  int64_t end = int64_t{index + 1} * count / workers;
  return std::vector<int>(cpus.begin() + begin, cpus.begin() + end);
}

Status PinToCpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::string names;
  for (int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE) {
      return InvalidArgument("cannot pin to CPU " + std::to_string(cpu));
    }
    CPU_SET(cpu, &set);
    names += (names.empty() ? "" : ",") + std::to_string(cpu);
  }
  if (cpus.empty()) {
    return InvalidArgument("cannot pin to an empty set of CPUs");
  }
  if (sched_setaffinity(0, sizeof(set), &set) != 0) {
    return InvalidArgument("sched_setaffinity(" + names + "): " + std::strerror(errno));
  }
  return OkStatus();
}

}  // namespace ferry
