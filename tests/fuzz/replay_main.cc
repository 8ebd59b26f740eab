// Without libFuzzer (gcc builds), each fuzz target is a regression test: it replays every
// file of its corpus directory, given as the argument, through LLVMFuzzerTestOneInput, and
// fails when any one input takes more than 1 s of CPU: the corpora hold the large crafted inputs
// (deep nesting, many tensors, huge products), so a regression to super-linear time fails.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  int files = 0;
  bool slow = false;
  double slowest = 0;
  for (const auto& entry : std::filesystem::directory_iterator(argv[1])) {
    std::ifstream in(entry.path(), std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    // Every prefix too: truncation is the commonest corruption.
    for (size_t cut = 0; cut <= bytes.size(); cut += 1 + bytes.size() / 64) {
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), cut);
    }
    // CPU time of this process, not wall time: a loaded CI machine must not fail the test.
    std::clock_t start = std::clock();
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
    double seconds = static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC;
    slowest = std::max(slowest, seconds);
    if (seconds > 1.0) {
      std::fprintf(stderr, "%s: %.2f s, more than the 1 s limit per input\n", entry.path().c_str(),
                   seconds);
      slow = true;
    }
    ++files;
  }
  std::printf("replayed %d corpus files; slowest %.3f s of CPU (limit 1 s)\n", files, slowest);
  return files > 0 && !slow ? 0 : 1;
}
