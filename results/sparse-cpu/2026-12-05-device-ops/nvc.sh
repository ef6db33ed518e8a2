#!/bin/bash
# compile one ggml-cuda TU for sm_90 with the CMake build's CUDA flags (Release, GGML_CUDA=ON, default FA set): nvc.sh TREE FILE.cu
T=$1; F=$2
exec /usr/local/cuda/bin/nvcc -std=c++17 -O3 -DNDEBUG -arch=sm_90 -extended-lambda --expt-relaxed-constexpr -use_fast_math \
  -DGGML_USE_CUDA -DGGML_CUDA_USE_GRAPHS -DGGML_SCHED_MAX_COPIES=4 -D_GNU_SOURCE -D_XOPEN_SOURCE=600 -DGGML_CUDA_PEER_MAX_BATCH_SIZE=128 \
  -DGGML_BACKEND_BUILD -DGGML_BACKEND_SHARED -DGGML_SHARED -Dggml_cuda_EXPORTS \
  -I$T/ggml/include -I$T/ggml/src -I$T/ggml/src/ggml-cuda -I${CUBLAS_INCLUDE:?the include dir of a cuBLAS wheel (nvidia-cublas-cu12)} \
  -Xcompiler -fPIC,-Wall,-Wextra,-Wno-unused-parameter,-Wno-unused-function -c $T/$F -o ${OBJ:-/tmp/obj}/$(basename $F).o
