/// @file
/// Stops a compile below C++20 with one line that names the requirement, before the dozens of
/// errors the headers would give (e.g. an nvcc that CMake 3.25 left at its C++17 default).
#pragma once

#if !defined(__cplusplus) || __cplusplus < 202002L
#error "cuactor needs C++20: compile with -std=c++20 (CMake: CXX_STANDARD 20 / CUDA_STANDARD 20)"
#endif
