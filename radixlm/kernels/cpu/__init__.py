"""CPU kernels written in C++ (AVX2/FMA + OpenMP), compiled on first use."""
