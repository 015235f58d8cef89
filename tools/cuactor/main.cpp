#include <CLI/CLI.hpp>

#include "commands.hpp"

int main(int argc, char** argv) {
  CLI::App app{"cuactor: supervised GPU devices, graph capture and CUTLASS kernels for C++ services"};
  app.require_subcommand(1);
  cuactor::cli::add_info_command(app);
  cuactor::cli::add_demo_command(app);
  cuactor::cli::add_bench_gemm_command(app);
  cuactor::cli::add_bench_grouped_command(app);
  cuactor::cli::add_jit_command(app);
  cuactor::cli::add_soak_command(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
