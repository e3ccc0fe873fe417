#!/usr/bin/env bash
# Downloads (does not install) the Debian 12 packages rlpt builds against besides LibTorch and
# CUDA — Open MPI, HDF5, yaml-cpp, fmt, CLI11, nlohmann-json, ICU, GoogleTest — into DIR, for a
# GPU node that has CUDA and a PyTorch wheel but no package registry. Run it where apt-get works
# (~32 MB), carry DIR to the node, then there: `DEBS=DIR; source scripts/gpu_node/env.sh`.
#   scripts/gpu_node/fetch_deps.sh DIR
set -euo pipefail
dir=${1:?usage: scripts/gpu_node/fetch_deps.sh DIR}
mkdir -p "$dir"; cd "$dir"
apt-get update -qq >/dev/null 2>&1 || true
pkgs=(
  # Open MPI and what it loads
  libopenmpi-dev libopenmpi3 openmpi-bin openmpi-common libpmix2 libhwloc15 libhwloc-plugins
  libevent-2.1-7 libevent-core-2.1-7 libevent-pthreads-2.1-7 libfabric1 libucx0 libpsm2-2
  libpsm-infinipath1 libibverbs1 ibverbs-providers librdmacm1 libnl-3-200 libnl-route-3-200
  libltdl7 libnuma1 libmunge2 libxnvctrl0
  # HDF5 (checkpoints)
  libhdf5-dev libhdf5-103-1 libhdf5-hl-100 libsz2 libaec0
  # header and small libraries
  libyaml-cpp-dev libyaml-cpp0.7 libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev
  libicu-dev libicu72 libgtest-dev googletest
)
apt-get download -qq "${pkgs[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true
# HDF5 links libcurl.so.4 for a virtual file driver rlpt never uses; a stub library stands in
# on nodes without libcurl.
if [ ! -f stub/libcurl.so.4 ]; then
  mkdir -p stub && echo 'int rlpt_libcurl_stub;' > stub/stub.c
  gcc -shared -fPIC -Wl,-soname,libcurl.so.4 -o stub/libcurl.so.4 stub/stub.c && rm stub/stub.c
fi
echo "$(ls ./*.deb | wc -l) packages in $dir"
