# Source me on an offline GPU node:   DEBS=<folder fetch_deps.sh filled>; source scripts/gpu_node/env.sh
# Unpacks the carried Debian packages into $RLPT_DEPS (default /opt/rlpt-deps, once), finds the
# PyTorch wheel's LibTorch ($RLPT_TORCH_PYTHON, default the python3 on PATH) and exports
#   RLPT_CMAKE_ARGS   an array:  cmake -S . -B build "${RLPT_CMAKE_ARGS[@]}" && cmake --build build -j
#   PATH, LD_LIBRARY_PATH, OPAL_PREFIX   so the unpacked Open MPI and libraries run.
# The unpacked Open MPI is used consistently (its mpicxx, and `mpirun` on PATH is its mpirun),
# whatever MPI the node has (tests/gpu_node_env_test.sh).
# NCCL is found by rlpt's CMake in the wheel (site-packages/nvidia/nccl).
: "${DEBS:?set DEBS to the folder scripts/gpu_node/fetch_deps.sh filled}"
_deps=${RLPT_DEPS:-/opt/rlpt-deps}
_py=${RLPT_TORCH_PYTHON:-$(command -v python3)}
if [ ! -d "$_deps/usr" ]; then
  mkdir -p "$_deps" && for _f in "$DEBS"/*.deb; do dpkg -x "$_f" "$_deps"; done
fi
_P=$_deps/usr
# Debian names its Open MPI programs mpirun.openmpi, mpicxx.openmpi, ... and makes mpirun, mpicxx
# alternatives links at install time, which `dpkg -x` never creates: make them here, or the
# node's own, other mpirun would start ranks built against these libraries.
for _f in "$_P"/bin/*.openmpi; do
  [ -e "$_f" ] && [ ! -e "${_f%.openmpi}" ] && ln -s "$(basename "$_f")" "${_f%.openmpi}"
done
_lib=$_P/lib/x86_64-linux-gnu
_site=$("$_py" -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))")
export OPAL_PREFIX=$_P PATH=$_P/bin:$PATH OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export LD_LIBRARY_PATH=$_lib:$_lib/openmpi/lib:$_lib/hdf5/serial:$_site/torch/lib:$_site/nvidia/nccl/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
RLPT_CMAKE_ARGS=(-DCMAKE_BUILD_TYPE=Release -DRLPT_TORCH_PYTHON="$_py" -DCMAKE_PREFIX_PATH="$_P"
  -DMPI_CXX_COMPILER="$_P/bin/mpicxx.openmpi" -DMPIEXEC_EXECUTABLE="$_P/bin/mpirun.openmpi"
  -DHDF5_C_COMPILER_EXECUTABLE=HDF5_C_COMPILER_EXECUTABLE-NOTFOUND
  -DHDF5_hdf5_LIBRARY_RELEASE="$_lib/hdf5/serial/libhdf5.so" -DHDF5_C_INCLUDE_DIR="$_P/include/hdf5/serial"
  -DICU_ROOT="$_P")
if ! ldconfig -p | grep -q 'libcurl.so.4 '; then
  export LD_LIBRARY_PATH=$DEBS/stub:$LD_LIBRARY_PATH
  RLPT_CMAKE_ARGS+=(-DCMAKE_EXE_LINKER_FLAGS=-Wl,--allow-shlib-undefined -DCMAKE_SHARED_LINKER_FLAGS=-Wl,--allow-shlib-undefined)
fi
if [ "$(command -v mpirun)" != "$_P/bin/mpirun" ]; then
  echo "gpu_node/env.sh: warning: mpirun is $(command -v mpirun || echo missing), not $_P/bin/mpirun" >&2
fi
unset _deps _py _P _lib _site _f
