// Subcommands of the cuactor CLI; each file adds one to the app.
#pragma once

#include <CLI/CLI.hpp>

#include "cuactor/jit/progress.hpp"

namespace cuactor::cli {

/// `cuactor info [--json]`: driver, runtime, devices, compiled kernel families, compilers, caches.
void add_info_command(CLI::App& app);
/// `cuactor demo`: a short checked demonstration of the library's headline work.
void add_demo_command(CLI::App& app);
/// The `bench` subcommand every benchmark command joins (made by whichever registers first).
CLI::App& bench_command(CLI::App& app);
/// `cuactor bench gemm`: dense GEMM plans vs cuBLAS at 4096^3 and 8192^3 (TFLOP/s and ratio).
void add_bench_gemm_command(CLI::App& app);
/// `cuactor bench grouped`: grouped GEMM vs a cuBLAS loop and cublasGemmGroupedBatchedEx (MoE shapes).
void add_bench_grouped_command(CLI::App& app);
/// `cuactor bench conv`: conv2d plans beside cuBLAS on a matrix product of the same implicit-GEMM
/// size (bench/conv_torch.py compares them with cuDNN).
void add_bench_conv_command(CLI::App& app);
/// `cuactor bench ep`: the expert-parallel MoE layer over every visible device (bench/ep_torch.py
/// prints it beside the PyTorch formulation).
void add_bench_ep_command(CLI::App& app);
/// `cuactor soak --isolated --faults N [--threads T]`: fault cycles under load on an isolated device.
void add_soak_command(CLI::App& app);
/// `cuactor jit warm|list|verify|clear|bench`: offline cache warming, cache inspection, JIT timings.
void add_jit_command(CLI::App& app);
/// `cuactor tune gemm|grouped`: sweeps that record the fastest correct kernel per problem class in
/// the tuning database.
void add_tune_command(CLI::App& app);
/// `cuactor tune grouped` (added by add_tune_command to its `tune` subcommand).
void add_tune_grouped_command(CLI::App& tune);
void add_kernels_command(CLI::App& app);

/// Progress of long compiles on stderr: one line per stage change, and every 5 s while compiling.
jit::ProgressFn compile_progress_printer();

}  // namespace cuactor::cli
