# Sourced by scripts/test and scripts/demo: which part of the kernel catalog to compile.
# The catalog's CUTLASS kernels take 85-105 s of nvcc each (the whole matrix: 90 minutes on 2 cores).
# Without a GPU none of them can run, so only the catalog's sample (kernels/catalog.cmake) is compiled
# there, a compile check of every instance template. CUACTOR_CATALOG=full|sample overrides.
# Sets CUACTOR_CATALOG, and guessed_sample=1 when it chose the sample for want of a GPU.
# $1: the calling script's name, for its messages.
choose_catalog() {
  guessed_sample=0
  if [ -z "${CUACTOR_CATALOG:-}" ]; then
    # /dev/dxg: a GPU under WSL2, whose nvidia-smi is often not on PATH.
    if ls /dev/nvidia[0-9]* /dev/dxg >/dev/null 2>&1 || nvidia-smi -L >/dev/null 2>&1; then
      CUACTOR_CATALOG=full
    else
      CUACTOR_CATALOG=sample guessed_sample=1
      echo "$1: NOTE: no GPU here, so the build compiles the kernel catalog's sample only"
      echo "$1: (CUACTOR_CATALOG=sample); scripts/gpu-check builds and runs the whole catalog."
    fi
  fi
}
