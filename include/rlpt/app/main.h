#pragma once
namespace rlpt::app {
// The whole program: parses the command line, initialises MPI, runs the chosen mode and
// returns the process exit code (0 success, see README "Exit codes").
int main(int argc, char** argv);
}  // namespace rlpt::app
