#include "rlpt/app/main.h"

int main(int argc, char** argv) { return rlpt::app::main(argc, argv); }
