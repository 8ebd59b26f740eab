// A library the missing-dependency fake module needs and the loader cannot find (it is
// built where no search path points), as libcublas.so.13 is missing on a host without CUDA.
extern "C" int ferry_fake_dependency() { return 1; }
