#include <CLI/CLI.hpp>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "commands.hpp"

namespace {

// The deepest subcommand the parser entered (the one whose choices a bad word missed).
CLI::App* deepest_parsed(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands())
    if (sub->parsed()) return deepest_parsed(sub);
  return app;
}

// "'frobnicate' is not a cuactor command; choose one of: info, demo, bench, jit" when the first
// word left over where a subcommand was required is not one; CLI11 would only say "A subcommand is
// required". Returns false when the error is of another kind (CLI11's message is then precise).
bool explain_unknown_subcommand(CLI::App& app) {
  CLI::App* at = deepest_parsed(&app);
  const auto subs = at->get_subcommands([](CLI::App*) { return true; });
  if (subs.empty()) return false;
  for (const std::string& word : app.remaining(true)) {
    if (word.empty() || word[0] == '-') continue;
    std::string names;
    for (const CLI::App* s : subs) names += (names.empty() ? "" : ", ") + s->get_name();
    const std::string where = at == &app ? "cuactor" : "cuactor " + at->get_name();
    std::cerr << where << ": '" << word << "' is not a command of " << where << "; choose one of: " << names << " (see "
              << where << " --help)\n";
    return true;
  }
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // No exception leaves main: every failure is a message and a non-zero exit status, never an abort.
  try {
    CLI::App app{"cuactor: supervised GPU devices, graph capture and CUTLASS kernels for C++ services"};
    app.require_subcommand(1);
    cuactor::cli::add_info_command(app);
    cuactor::cli::add_demo_command(app);
    cuactor::cli::add_bench_gemm_command(app);
    cuactor::cli::add_bench_grouped_command(app);
    cuactor::cli::add_bench_conv_command(app);
    cuactor::cli::add_bench_ep_command(app);
    cuactor::cli::add_jit_command(app);
    cuactor::cli::add_tune_command(app);
    cuactor::cli::add_kernels_command(app);
    cuactor::cli::add_soak_command(app);
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      if (e.get_exit_code() != 0 && explain_unknown_subcommand(app))
        return static_cast<int>(CLI::ExitCodes::ExtrasError);
      return app.exit(e);
    }
    return 0;
  } catch (const std::bad_alloc&) {
    std::cerr << "cuactor: out of memory\n";
  } catch (const std::exception& e) {
    std::cerr << "cuactor: internal error (an exception reached main): " << e.what() << "\n";
  } catch (...) {
    std::cerr << "cuactor: internal error (a non-standard exception reached main)\n";
  }
  return 70;  // EX_SOFTWARE
}
