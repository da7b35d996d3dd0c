"""CPU kernels written in C++ (AVX2/FMA, a small thread pool of their own), compiled on first use."""
